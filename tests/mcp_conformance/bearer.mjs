// Loaded with `node --import ./bearer.mjs`: every HTTP request of the process
// (the SDK client's fetch and the suite's own undici requests both use undici's
// global dispatcher) carries `Authorization: Bearer $NEOTASK_MCP_TOKEN`, as an
// MCP host configured with a Neotask API token sends it. The conformance CLI
// has no option for a header of its own.
import { Agent, setGlobalDispatcher } from "undici";

const authorization = `Bearer ${process.env.NEOTASK_MCP_TOKEN}`;

function withToken(headers) {
  if (Array.isArray(headers)) {
    return [...headers, "authorization", authorization];
  }
  if (headers && typeof headers[Symbol.iterator] === "function") {
    return [...Array.from(headers).flat(), "authorization", authorization];
  }
  return { ...(headers ?? {}), authorization };
}

setGlobalDispatcher(
  new Agent().compose(
    (dispatch) => (options, handler) =>
      dispatch({ ...options, headers: withToken(options.headers) }, handler),
  ),
);

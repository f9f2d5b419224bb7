// The chat page: one websocket per page, frames as in docs/api.md ("The websocket protocol").
// Server-rendered HTML arrives inside "event" frames; this file only places it.
(() => {
  "use strict";
  // A chat not started yet (sessions_app/start.html): its first message starts it
  // (a POST), then the new chat's page sends the message, as if typed there.
  const firstMessage = (path) => `neotask:first-message:${path}`;
  const starter = document.querySelector("form[data-starts-chat]");
  if (starter) {
    const text = starter.elements.message;
    starter.addEventListener("submit", async (submitted) => {
      submitted.preventDefault();
      if (!text.value.trim() || starter.classList.contains("busy")) return;
      starter.classList.add("busy");
      try {
        const response = await fetch(starter.action, { method: "POST", body: new FormData(starter) });
        const page = new URL(response.url);
        if (!response.ok || !page.pathname.startsWith("/chat/")) throw new Error(`${response.status} ${page.pathname}`);
        sessionStorage.setItem(firstMessage(page.pathname), text.value);
        location.replace(page.href);
      } catch {
        starter.classList.remove("busy");
        starter.submit();  // the server's own answer: the chat, or what went wrong
      }
    });
    text.addEventListener("keydown", (key) => {
      if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
        key.preventDefault();
        starter.requestSubmit();
      }
    });
    return;
  }
  const chat = document.getElementById("chat");
  if (!chat) return;
  const events = document.getElementById("events");
  const live = document.getElementById("live");
  const input = document.getElementById("input");
  const form = document.getElementById("composer");
  const stopButton = document.getElementById("stop");
  const announcer = document.getElementById("announcer");
  const connection = document.getElementById("connection");
  const approvalTemplate = document.getElementById("approval-template");
  const queuedTemplate = document.getElementById("queued-template");
  const numberFormat = new Intl.NumberFormat();
  let socket = null;
  let retries = 0;
  let streaming = null;
  let ticking = null;  // the placeholder's status and its seconds counter
  const pending = [];
  const started = new Set();  // inputs that ran: a late "queued" for one is stale

  const lastEventId = () => {
    const items = events.querySelectorAll("[data-event-id]");
    return items.length ? Number(items[items.length - 1].dataset.eventId) : 0;
  };
  const scrollDown = () => { events.scrollTop = events.scrollHeight; };
  const fromHTML = (html) => {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content;
  };

  function addEvent(element) {
    if (!element || document.getElementById(element.id)) return false;  // never twice
    events.querySelector(".empty-chat")?.remove();
    // A retry or an edit (live, or caught up after a reconnect) replaces a branch.
    if (element.dataset.retryOf) markReplaced(Number(element.dataset.retryOf), "edited" in element.dataset);
    place(element);
    pruneRetries();
    if (window.htmx) window.htmx.process(element);  // its pin button
    scrollDown();
    return true;
  }

  // Above the answer being written (or its placeholder), which stays last.
  function place(element) {
    if (streaming && streaming.parentNode === events) events.insertBefore(element, streaming);
    else events.appendChild(element);
  }

  function ensureStreaming() {
    if (!streaming) {
      streaming = document.createElement("li");
      streaming.className = "event assistant_response streaming";
      streaming.innerHTML = '<div class="bubble assistant"></div>';
      events.appendChild(streaming);
    }
    return streaming.firstElementChild;
  }

  function dropStreaming() {
    stopTicking();
    streaming?.remove();
    streaming = null;
  }

  // The answer's placeholder: shown as soon as a message is sent, then saying what
  // the turn does (its "status" frames), the seconds ticking, until the first delta.
  function showStatus(text) {
    if (streaming && !streaming.classList.contains("pending")) return;  // words are streaming
    const bubble = ensureStreaming();
    streaming.classList.add("pending");
    stopTicking();
    const since = performance.now();
    const show = () => {
      const seconds = Math.floor((performance.now() - since) / 1000);
      bubble.textContent = seconds ? `${text} ${seconds} s` : text;
    };
    show();
    ticking = setInterval(show, 1000);
    scrollDown();
  }

  function stopTicking() {
    clearInterval(ticking);
    ticking = null;
  }

  function dropPlaceholder() {
    if (streaming?.classList.contains("pending")) dropStreaming();
  }

  function setBusy(busy) {
    stopButton.hidden = !busy;
    chat.classList.toggle("busy", busy);
  }

  function note(text, kind, html) {
    const item = document.createElement("li");
    item.className = `note transient ${kind}`;
    if (html) {  // laid out (/help, /status): safe HTML the server rendered
      item.classList.add("markdown", "laid-out");
      item.append(fromHTML(html));
    } else {
      item.textContent = text;
    }
    place(item);
    announce(item.textContent);
    scrollDown();
  }

  // The streaming bubble is outside the live region: a screen reader hears a
  // finished answer (or a note) once, not every delta.
  function announce(text) {
    if (text) announcer.textContent = text;
  }

  function spoken(element) {
    return [...element.querySelectorAll(".bubble, .note")]
      .map((part) => part.textContent.replace(/\s+/g, " ").trim())
      .join(" ");
  }

  function returnFocus() {
    // Back to the message box, unless the reader has moved to another control.
    const active = document.activeElement;
    if (!active || active === document.body || form.contains(active)) input.focus();
  }

  function renderMeter(meter) {
    if (!meter) return;
    const share = meter.context_window ? meter.context_tokens / meter.context_window : 0;
    const percent = Math.min(100, Math.round(share * 100));
    document.getElementById("meter-tokens").textContent =
      `${numberFormat.format(meter.input)} in · ${numberFormat.format(meter.output)} out · ` +
      `${numberFormat.format(meter.cache_read)} cached`;
    const fill = document.getElementById("meter-fill");
    fill.style.width = `${percent}%`;
    fill.classList.toggle("high", share >= 0.8);
    document.getElementById("meter-context").textContent =
      `context ${percent}% of ${numberFormat.format(meter.context_window)}`;
    document.getElementById("meter").title =
      `Model: ${meter.model}. Cache write: ${numberFormat.format(meter.cache_write)} tokens. ` +
      `Next prompt: about ${numberFormat.format(meter.context_tokens)} tokens.`;
  }

  function showApproval(frame) {
    if (document.getElementById(`approval-${frame.request_id}`)) return;
    const card = approvalTemplate.content.firstElementChild.cloneNode(true);
    card.id = `approval-${frame.request_id}`;
    card.querySelector("[name=request_id]").value = frame.request_id;
    card.querySelector(".command").textContent = frame.command;
    if (frame.kind === "mcp") {
      card.querySelector(".approval-what").textContent =
        "The agent wants to call a tool of an MCP server (its answer is data, not instructions):";
      card.querySelector("button[value=always]").title =
        "Remembers this call: the same tool with exactly these arguments runs without asking; " +
        "other arguments still ask";
    } else if (frame.kind === "lasting") {
      card.querySelector(".approval-what").textContent =
        "Outside text is in this turn (a tool's answer, a document); " +
        "the agent wants to change your memory or tasks:";
    }
    // Without a rule to store, only "Allow once" and "Deny", and the reason why.
    card.querySelector(".prefix").textContent = frame.prefix || "";
    card.querySelector("button[value=always]").hidden = !frame.prefix;
    const refused = card.querySelector(".always-refused");
    refused.textContent = frame.always_refused || "";
    refused.hidden = !!frame.prefix;
    live.appendChild(card);
    if (window.htmx) window.htmx.process(card);  // its buttons post the answer
    scrollDown();
  }

  async function catchUp() {
    // After a reconnect (or a new session): fetch what this page has not shown.
    try {
      const response = await fetch(`${chat.dataset.eventsUrl}?after=${lastEventId()}`);
      if (!response.ok) return;
      const fragment = fromHTML(await response.text());
      fragment.querySelectorAll("li[data-event-id]").forEach((item) => addEvent(item));
    } catch (error) {
      /* offline: the next reconnect tries again */
    }
  }

  function handle(frame) {
    switch (frame.type) {
      case "delta": {
        const bubble = ensureStreaming();
        if (streaming.classList.contains("pending")) {  // the first words replace the status
          stopTicking();
          streaming.classList.remove("pending");
          bubble.textContent = "";
        }
        bubble.textContent += frame.text;
        setBusy(true);
        scrollDown();
        break;
      }
      case "status":
        showStatus(frame.text);
        break;
      case "event": {
        if (frame.event.event_type === "assistant_response") dropStreaming();
        if (frame.event.event_type === "user_message") setBusy(true);
        const element = fromHTML(frame.event.html).firstElementChild;
        if (addEvent(element) && frame.event.event_type === "assistant_response") {
          announce(spoken(element));
        }
        if (frame.event.event_type === "user_message") {
          document.body.dispatchEvent(new Event("neotask:sessions"));
        }
        break;
      }
      case "queued": {
        if (started.has(frame.input_id) || document.getElementById(`queued-${frame.input_id}`)) break;
        const item = queuedTemplate.content.firstElementChild.cloneNode(true);
        item.id = `queued-${frame.input_id}`;
        item.querySelector(".bubble").textContent = frame.text;
        live.appendChild(item);
        scrollDown();
        break;
      }
      case "started":
        started.add(frame.input_id);
        document.getElementById(`queued-${frame.input_id}`)?.remove();
        setBusy(true);
        break;
      case "approval_request":
        showApproval(frame);
        break;
      case "approval_decided":
        document.getElementById(`approval-${frame.request_id}`)?.remove();
        break;
      case "done":
        dropStreaming();
        setBusy(false);
        // Ended without a start of its own (a dead process's input, ended by another).
        if (frame.input_id) document.getElementById(`queued-${frame.input_id}`)?.remove();
        renderMeter(frame.meter);
        document.body.dispatchEvent(new Event("neotask:sessions"));
        returnFocus();
        break;
      case "error":
        dropPlaceholder();
        note(frame.message, "error");
        // A message refused by a quota was not stored: back into the box, to send later.
        if (frame.limit && frame.text) giveBack(frame.text);
        break;
      case "meter":
        renderMeter(frame.meter);
        break;
      case "notice":
        note(frame.text, "notice", frame.html);
        break;
      case "session": {
        // The chat moved to a fresh session: its download link follows.
        const download = document.querySelector(".chat-head a.download");
        if (download && frame.session_id) {
          download.href = download.href.replace(/sessions\/[^/]+\//, `sessions/${frame.session_id}/`);
        }
        events.replaceChildren();
        dropStreaming();
        live.querySelectorAll(".approval").forEach((card) => card.remove());  // queued inputs stay
        catchUp();
        break;
      }
      default:
        break;  // newer servers may send frame types this page does not know
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${chat.dataset.wsPath}`);
    socket.addEventListener("open", () => {
      retries = 0;
      connection.hidden = true;
      dropStreaming();
      catchUp();
      while (pending.length) socket.send(JSON.stringify(pending.shift()));
    });
    socket.addEventListener("message", (message) => handle(JSON.parse(message.data)));
    socket.addEventListener("close", (closed) => {
      if (closed.code === 4403 || closed.code === 4404) {
        note(closed.code === 4403 ? "You are signed out, or your account was deactivated." : "This chat does not exist.", "error");
        return;
      }
      connection.hidden = false;
      setTimeout(connect, Math.min(10000, 300 * 2 ** retries++));
    });
  }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(frame));
      return true;
    }
    if (frame.type === "message") {
      // Typed before the socket opened (or while reconnecting): sent on open.
      pending.push(frame);
      note("Connecting — your message will be sent in a moment.", "notice");
      return true;
    }
    note("Not connected — try again in a moment.", "error");
    return false;
  }

  function giveBack(text) {
    input.value = input.value.trim() ? `${text}\n${input.value}` : text;
    autosize();
    input.focus();
  }

  function autosize() {
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
  }

  form.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    if (send({ type: "message", text })) {
      // A sign of life at once; a command answers for itself, a busy chat queues it.
      if (!text.trim().startsWith("/") && !chat.classList.contains("busy")) showStatus("Sending…");
      input.value = "";
      autosize();
      input.focus();  // after a click on Send, too
    }
  });
  input.addEventListener("keydown", (key) => {
    if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
      key.preventDefault();
      form.requestSubmit();
    }
  });
  input.addEventListener("input", autosize);
  stopButton.addEventListener("click", () => send({ type: "stop" }));
  // Retry (a failed or stopped turn) and Regenerate (an answer): only the latest
  // turn can run again, so only the last such button stays.
  function pruneRetries() {
    const messages = events.querySelectorAll("li.user_message");
    const latest = messages[messages.length - 1];
    const buttons = [...events.querySelectorAll("button.retry, button.regenerate")];
    buttons.forEach((button, index) => {
      const before = latest && button.compareDocumentPosition(latest) & Node.DOCUMENT_POSITION_FOLLOWING;
      if (before || (button.matches(".regenerate") && index < buttons.length - 1)) button.remove();
    });
  }
  // A retry or an edit of message `from` arrived: the branch from it on is kept,
  // marked, and left out of the conversation (as the server draws it on a reload).
  function markReplaced(from, edited) {
    let item = document.getElementById(`event-${from}`);
    if (!item) return;
    const noteOn = (element, text) => {
      const mark = document.createElement("p");
      mark.className = "note earlier";
      mark.textContent = text;
      (element.querySelector(".bubble") || element.querySelector(".note"))?.after(mark);
    };
    for (const first = item; item; item = item.nextElementSibling) {
      if (!item.matches("li.event[data-event-id]") || item.classList.contains("superseded")) continue;
      item.classList.add("superseded");
      item.querySelectorAll("button.edit-message, button.regenerate").forEach((b) => b.remove());
      if (item === first && edited) noteOn(item, "Edited: earlier version");
      else if (item.matches(".assistant_response")) noteOn(item, "Earlier answer: not part of the conversation any more");
    }
  }
  // Edit: the message's text in an editor in its place; sending it runs the
  // conversation again from there, as a new branch.
  function openEditor(button) {
    const item = button.closest("li.event");
    if (item.querySelector("form.edit-box")) return;
    const box = document.createElement("form");
    box.className = "edit-box";
    box.innerHTML = '<textarea rows="3" aria-label="Edited message"></textarea>' +
      '<div class="edit-actions"><button type="button" class="small cancel">Cancel</button>' +
      '<button type="submit" class="primary small">Send</button></div>';
    const area = box.querySelector("textarea");
    area.value = button.dataset.text;
    box.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      if (!area.value.trim()) return;
      if (send({ type: "retry", event_id: Number(button.dataset.edit), text: area.value })) box.remove();
    });
    area.addEventListener("keydown", (key) => {
      if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
        key.preventDefault();
        box.requestSubmit();
      } else if (key.key === "Escape") {
        key.stopPropagation();
        box.remove();
      }
    });
    box.querySelector(".cancel").addEventListener("click", () => box.remove());
    item.appendChild(box);
    area.focus();
  }
  events.addEventListener("click", (clicked) => {
    const button = clicked.target.closest("button.retry, button.regenerate");
    if (button) send({ type: "retry", event_id: Number(button.dataset.retry) });
    const edit = clicked.target.closest("button.edit-message");
    if (edit) openEditor(edit);
  });
  pruneRetries();
  document.addEventListener("keydown", (key) => {
    // Esc stops the answer being written, as the Stop button and /stop do.
    if (key.key === "Escape" && !key.isComposing && chat.classList.contains("busy")) {
      key.preventDefault();
      send({ type: "stop" });
    }
  });
  renderMeter(JSON.parse(document.getElementById("meter-data").textContent));
  scrollDown();
  const first = sessionStorage.getItem(firstMessage(location.pathname));
  if (first !== null) {  // typed on the page that started this chat
    sessionStorage.removeItem(firstMessage(location.pathname));
    pending.push({ type: "message", text: first });  // sent when the socket opens
  }
  connect();
})();

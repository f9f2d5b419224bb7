"""MCP both ways, side by side: the client (`client`: other programs' MCP servers
as the agent's tools) and the server (`server`: Neotask's memory and tools for
other programs at /mcp)."""

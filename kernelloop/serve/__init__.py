"""What serves others: runs (solve, resume, replay, fork), background jobs, the MCP server, the
LangChain tools, and the request models they all validate with."""

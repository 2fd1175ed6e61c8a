"""`timely-fleet mcp`: a Model Context Protocol front end through which AI agents task the fleet.

The MCP server is a *client* of a running planner (``timely-fleet up``): every goal an agent sends
is an ordinary ``PlanTask`` goal, subject to the planner's validation, budgets, fence and
approvals like any other. Modules:

- :mod:`.tokens` — the HTTP transport's token file (SHA-256 of each bearer token, the robots and
  urgencies it may use, operator right) and ``timely-fleet mcp token add|list|remove``;
- :mod:`.bridge` — the ROS side: its own rclpy context and executor thread, the goals this server
  sent (with their cancel keys), what the planner publishes (goals, results, stats, /diagnostics,
  robot status);
- :mod:`.server` — the MCP tools and resources (official MCP Python SDK, ``MCPServer``), the
  bearer-token check of the HTTP transport, stdio and streamable HTTP;
- :mod:`.command` — the command line (``add_arguments`` / ``run``).
"""

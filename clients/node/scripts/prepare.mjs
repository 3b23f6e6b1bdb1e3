// `npm install ../appserver/clients/node` (or from git, or `npm pack`) runs this:
// dist/ is built, not checked in. A folder install links this directory without
// installing its devDependencies, so TypeScript is installed here first when missing
// (`npm ci --ignore-scripts`: not this script again, and no esbuild binary download).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const run = (args) => execFileSync(npm, args, { cwd: root, stdio: "inherit" });

if (!existsSync(join(root, "node_modules", "typescript", "package.json"))) {
  run(["ci", "--no-audit", "--no-fund", "--ignore-scripts"]);
}
run(["run", "--silent", "build"]);

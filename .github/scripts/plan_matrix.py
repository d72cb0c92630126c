"""Turn `rocmlock plan --json` into the build-variants workflow's job matrix (GitHub `$GITHUB_OUTPUT` lines).

One job per GPU target: it builds, in dependency order, every missing variant of the environments for that
target (`rocmlock build -e ENV ...`), on a self-hosted runner labelled with the target. A group whose
missing variants are all noarch (metapackages, pure-Python packages) runs on a GitHub-hosted runner.
Stdlib only: it runs before anything is installed.

    rocmlock plan --json --channel "$CHANNEL" > plan.json
    python .github/scripts/plan_matrix.py plan.json >> "$GITHUB_OUTPUT"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SELF_HOSTED = ["self-hosted", "linux", "x64", "rocm"]
HOSTED = "ubuntu-latest"


def env_targets(variants: list[dict]) -> dict[str, str]:
    """Environment -> its GPU target, from any variant of the plan that carries one."""
    out: dict[str, str] = {}
    for v in variants:
        gfx = v["variant"].get("gpu_target")
        for env in v["environments"]:
            if gfx and env not in out:
                out[env] = gfx
    return out


def matrix(plan: dict) -> list[dict]:
    """The matrix `include` list: one entry per target with something to build, sorted by target."""
    variants = plan["variants"]
    targets = env_targets(variants)
    groups: dict[str, dict] = {}
    for v in variants:
        if v["present"] or v["skip_reason"] is not None:
            continue
        for env in v["environments"]:
            key = targets.get(env, "noarch")
            group = groups.setdefault(key, {"target": key, "environments": set(), "variants": 0, "compiles": False})
            group["environments"].add(env)
        group_keys = {targets.get(env, "noarch") for env in v["environments"]}
        for key in group_keys:
            groups[key]["variants"] += 1
            groups[key]["compiles"] |= v["subdir"] != "noarch"
    include = []
    for key, g in sorted(groups.items()):
        runs_on = [*SELF_HOSTED, key] if g["compiles"] else [HOSTED]
        include.append({"target": key, "environments": " ".join(f"-e {e}" for e in sorted(g["environments"])),
                        "variants": g["variants"], "runs_on": runs_on})
    return include


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    include = matrix(plan)
    print(f"matrix={json.dumps({'include': include}, separators=(',', ':'))}")
    print(f"any={'true' if include else 'false'}")
    for problem in plan.get("problems", []):
        print(f"plan problem: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

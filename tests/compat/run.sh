#!/usr/bin/env bash
# The suite on every supported Python, each in a scratch virtual environment built with
# pyenv's interpreters. Not part of CI: torch on Python 3.10 and 3.13 is a CUDA build of
# several GB from the package index (3.11 runs in CI with the local CPU build).
#
#   tests/compat/run.sh                 # the quick profile (-m "not slow") on 3.10 and 3.13
#   tests/compat/run.sh --full          # the whole suite
#   PYTHONS="3.10 3.12 3.13" tests/compat/run.sh
#
# Environments live in ${COMPAT_DIR:-$HOME/.cache/devinspect-compat}/py<version> and are reused;
# logs go next to them. Prints one table row per Python.
set -uo pipefail
cd "$(dirname "$0")/../.."
root="${COMPAT_DIR:-$HOME/.cache/devinspect-compat}"
pythons="${PYTHONS:-3.10 3.13}"
marker=(-m "not slow")
[ "${1:-}" = "--full" ] && marker=()
mkdir -p "$root"
rows=()
for version in $pythons; do
    interpreter="$(pyenv root)/versions/$(pyenv versions --bare | grep -E "^${version//./\\.}(\.|$)" | tail -1)/bin/python"
    if [ ! -x "$interpreter" ]; then
        rows+=("| $version | - | - | no interpreter from pyenv |")
        continue
    fi
    env="$root/py$version"
    log="$root/py$version.log"
    started=$(date +%s)
    if [ ! -x "$env/bin/python" ]; then
        "$interpreter" -m venv "$env" || { rows+=("| $version | - | - | venv failed |"); continue; }
    fi
    # The newest torch the index offers for this Python (3.11 is pinned to 2.13.0 in CI).
    "$env/bin/pip" install -q --upgrade pip >/dev/null 2>&1
    "$env/bin/pip" install -q torch >"$log" 2>&1 && "$env/bin/pip" install -q -e ".[test]" >>"$log" 2>&1 \
        || { rows+=("| $version | - | - | install failed: see $log |"); continue; }
    torch_version="$("$env/bin/python" -c 'import torch; print(torch.__version__)')"
    "$env/bin/python" -m pytest "${marker[@]}" -q -p no:cacheprovider >>"$log" 2>&1
    # pytest's last line: "N passed, …", "N failed, …" or "… N error(s) in …".
    summary="$(grep -E '(passed|failed|error|errors|no tests ran)( |,).* in [0-9.]+s' "$log" | tail -1 | tr -d '=')"
    rows+=("| $version | $torch_version | $(( $(date +%s) - started )) s (with install) | ${summary# } |")
done
echo "| Python | torch | time | result |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"

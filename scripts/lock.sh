#!/usr/bin/env bash
# Regenerate requirements/lock-cpu.txt from the environment `make setup` built (after a deliberate
# upgrade: edit requirements/*.txt, run `rm .venv/.stamp-deps && make setup`, run `make test`, then this).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
{
  echo "# The versions CI last passed with (ENGINE=cpu): \`make setup\` installs requirements/*.txt under these"
  echo "# constraints, so a new release on the index changes nothing until this file does. Regenerate"
  echo "# deliberately (an upgrade is its own commit): scripts/lock.sh"
  "$ROOT/.venv/bin/python" -m pip freeze --exclude-editable 2>/dev/null | grep -v '^timely[-_]fleet' | grep -v ' @ '
} > "$ROOT/requirements/lock-cpu.txt"
echo "wrote requirements/lock-cpu.txt ($(grep -vc '^#' "$ROOT/requirements/lock-cpu.txt") packages)"

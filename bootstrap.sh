# Sourced by ./demo and ./test: make_venv DIR [PIP-ARGS...] makes DIR (once) with dynsource and its test
# extras installed, reinstalling when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PYTHON="${PYTHON:-python3}"

make_venv() {
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "dynsource needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
    "$PYTHON" -m venv "$dir"
  fi
  local stamp="$dir/.dynsource-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$dir/bin/python" -m pip install --quiet --upgrade pip
    "$dir/bin/python" -m pip install --quiet -e '.[test]' "$@"
    touch "$stamp"
  fi
}

# Sourced by ./demo and ./test: make .venv (once) and install dynsource with its test extras into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "dynsource needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.dynsource-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"

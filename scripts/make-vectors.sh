#!/usr/bin/env bash
# Regenerate the SQLite3 Multiple Ciphers test vectors in tests/vectors/mc
# (replacing the old ones) with the pinned reference implementation.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/install-reference.sh
node tests/interop/gen_vectors.js tests/vectors/mc
python3 tests/interop/manifest_tsv.py tests/vectors/mc/manifest.json

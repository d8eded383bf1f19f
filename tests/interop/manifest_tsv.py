#!/usr/bin/env python3
"""Writes manifest.tsv beside manifest.json so the C tests need no JSON parser.

Columns: file, extra_files (comma-separated, '-' if none), cipher, legacy, key, page_size,
journal_mode, kind, rows, digest. Keys never contain tabs or newlines (checked).
"""
import json
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "tests/vectors/mc/manifest.json"
dst = src[: -len(".json")] + ".tsv"
manifest = json.load(open(src, encoding="utf-8"))
with open(dst, "w", encoding="utf-8") as out:
    for v in manifest["vectors"]:
        fields = [v["file"], ",".join(v["extra_files"]) or "-", v["cipher"], str(v["legacy"]),
                  v["key"], str(v["page_size"]), v["journal_mode"], v["kind"], str(v["rows"]),
                  v["digest"]]
        if any("\t" in f or "\n" in f for f in fields):
            sys.exit("manifest_tsv: a field contains a tab or newline")
        out.write("\t".join(fields) + "\n")
print(f"manifest_tsv: wrote {dst} ({len(manifest['vectors'])} vectors)")

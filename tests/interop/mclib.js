'use strict';
// Shared helpers for the SQLite3 Multiple Ciphers interop scripts
// (gen_vectors.js, mc_dump.js). Uses the reference implementation installed by
// scripts/install-reference.sh.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const REPO = path.resolve(__dirname, '..', '..');
const PKG = 'better-sqlite3-multiple-ciphers';

// MC_REFERENCE_DIR may point at another install (e.g. tools/reference-11.10.0);
// relative paths are taken relative to the repository root.
function referenceDir() {
  const d = process.env.MC_REFERENCE_DIR || 'tools/reference';
  return path.resolve(REPO, d);
}

function loadReference() {
  const dir = path.join(referenceDir(), 'node_modules', PKG);
  let Database, pkg;
  try {
    Database = require(dir);
    pkg = require(path.join(dir, 'package.json'));
  } catch (e) {
    const err = new Error(`cannot load ${PKG} from ${path.relative(REPO, dir)} ` +
      `(run scripts/install-reference.sh): ${e.message}`);
    err.cause = e;
    throw err;
  }
  return { Database, version: pkg.version };
}

// SQL string literal: single quotes, embedded quotes doubled. The pragma
// parser dequotes it, so the codec receives exactly the bytes of `s`.
function sqlQuote(s) {
  return "'" + String(s).replace(/'/g, "''") + "'";
}

// Apply cipher configuration and key to a freshly opened connection. `extra`
// is a list of [name, value] cipher pragmas issued after `cipher`/`legacy` and
// before the key (e.g. ['legacy_page_size', 4096]).
function applyKey(db, { cipher, legacy, key, extra = [] }) {
  if (cipher) db.exec(`PRAGMA cipher=${sqlQuote(cipher)}`);
  if (legacy !== undefined && legacy !== null) db.exec(`PRAGMA legacy=${Number(legacy)}`);
  for (const [k, v] of extra) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new Error(`bad pragma name ${k}`);
    db.exec(`PRAGMA ${k}=${typeof v === 'number' ? v : sqlQuote(v)}`);
  }
  if (key !== undefined && key !== null) db.exec(`PRAGMA key=${sqlQuote(key)}`);
}

// Canonical dump of table t: for each row of
//   SELECT id, name, hex(data) FROM t ORDER BY id
// the UTF-8 line `id|name|HEXDATA\n` (HEXDATA uppercase, NULL -> empty),
// concatenated. Returns { rows, digest } with digest = lowercase hex SHA-256.
function canonicalDigestFromDb(db) {
  const h = crypto.createHash('sha256');
  let rows = 0;
  const stmt = db.prepare('SELECT id, name, hex(data) FROM t ORDER BY id').raw(true);
  for (const [id, name, hex] of stmt.iterate()) {
    h.update(`${id}|${name}|${hex === null ? '' : hex}\n`, 'utf8');
    rows++;
  }
  return { rows, digest: h.digest('hex') };
}

function sha256File(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

module.exports = { REPO, PKG, referenceDir, loadReference, sqlQuote, applyKey,
  canonicalDigestFromDb, sha256File };

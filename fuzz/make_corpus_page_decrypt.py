#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_page_decrypt (fuzz/corpus/page_decrypt).

Input layout: see fuzz/fuzz_page_decrypt.c. Some seeds are valid ciphertexts under the
target's fixed keys, built here from the format description (FORMAT.md §2-§4) with
Python's `cryptography`, so the replay also walks the success paths; the rest is garbage
and bad arguments. Deterministic: rerunning gives the same files.

USAGE: python3 fuzz/make_corpus_page_decrypt.py   (needs python3-cryptography)
"""
import hashlib
import hmac
import os
import random
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.poly1305 import Poly1305

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "page_decrypt")
RAW_KEY = bytes(range(0x40, 0x60))
SALT = b"\x11" * 16
AES_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
rng = random.Random(20261130)


def rand(n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def header(page_size, reserve):
    size = 1 if page_size == 65536 else page_size
    return struct.pack(">HBBBBBB", size, 1, 1, reserve, 0x40, 0x20, 0x20)


def plain_page(page_size, pgno, reserve):
    page = bytearray(rand(page_size))
    if pgno == 1:
        page[0:16] = b"SQLite format 3\0"
        page[16:24] = header(page_size, reserve)
    return page


def chacha(key, counter, nonce12, data):
    enc = Cipher(algorithms.ChaCha20(key, struct.pack("<I", counter) + nonce12), None).encryptor()
    return enc.update(data)


def chacha20_page(pgno, page_size):
    n = page_size - 32
    plain = plain_page(page_size, pgno, 32)
    nonce = rand(12) + struct.pack("<I", 0x100 ^ pgno)  # small counter: no wrap
    ctr = struct.unpack("<I", nonce[12:])[0] ^ pgno
    otk = chacha(RAW_KEY, ctr, nonce[:12], bytes(64))
    off = 24 if pgno == 1 else 0
    out = bytearray(page_size)
    out[off:n] = chacha(otk[32:], ctr + 1, nonce[:12], bytes(plain[off:n]))
    if pgno == 1:
        out[0:16] = SALT
        out[16:24] = plain[16:24]
    out[n : n + 16] = nonce
    out[n + 16 :] = Poly1305.generate_tag(otk[:32], bytes(out[: n + 16]))
    return bytes(out)


def sqlcipher_page(pgno, page_size):  # pages other than 1: same for legacy 0 and 4
    n = page_size - 80
    hmac_key = hashlib.pbkdf2_hmac("sha512", RAW_KEY, bytes(b ^ 0x3A for b in SALT), 2, 32)
    plain = plain_page(page_size, pgno, 80)
    iv = rand(16)
    enc = Cipher(algorithms.AES(RAW_KEY), modes.CBC(iv)).encryptor()
    body = enc.update(bytes(plain[:n])) + iv
    return body + hmac.new(hmac_key, body + struct.pack("<I", pgno), "sha512").digest()


def aes256cbc_page1(page_size):
    pw = b"fuzz"
    d = hashlib.sha256(pw + AES_PAD[: 32 - len(pw)]).digest()
    for _ in range(4001):
        d = hashlib.sha256(d).digest()
    key = hashlib.sha256(d + struct.pack("<I", 1) + b"sAlT").digest()
    z, seq = 2, b""
    for _ in range(4):
        q = int(z / 52774)
        z = 40692 * (z - 52774 * q) - 3791 * q
        z = z + 2147483399 if z < 0 else z
        seq += struct.pack("<I", z)
    iv = hashlib.md5(seq).digest()
    plain = plain_page(page_size, 1, 0)
    a = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor().update(bytes(plain[:16]))
    b = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor().update(bytes(plain[16:]))
    return a[:8] + b[:8] + bytes(plain[16:24]) + b[8:]


def seed(name, cipher, size_index, pgno, flags, body):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([cipher, size_index]) + struct.pack("<I", pgno) + bytes([flags]) + body)


def main():
    os.makedirs(OUT, exist_ok=True)
    seed("chacha20-valid-p3", 0, 0, 3, 0, chacha20_page(3, 512))
    seed("chacha20-valid-p1", 0, 0, 1, 1, chacha20_page(1, 512))
    seed("chacha20-short-4096", 0, 3, 9, 0, rand(100))
    seed("sqlcipher-valid-p2", 2, 0, 2, 0, sqlcipher_page(2, 512))
    seed("sqlcipher-legacy4-valid-p5", 3, 0, 5, 0, sqlcipher_page(5, 512))
    seed("sqlcipher-garbage-p1", 2, 0, 1, 1, rand(512))
    seed("aes256cbc-valid-p1", 1, 0, 1, 1, aes256cbc_page1(512))
    seed("aes256cbc-plain-p1", 1, 0, 1, 1, bytes(plain_page(512, 1, 0)))
    seed("aes256cbc-garbage-p2", 1, 0, 2, 0, rand(512))
    seed("pgno-zero", 0, 0, 0, 0, rand(64))
    seed("header-flag-on-p2", 2, 0, 2, 1, rand(64))
    seed("unknown-flags", 0, 0, 1, 0xFF, rand(64))
    seed("max-pgno-65536", 3, 7, 0xFFFFFFFF, 0, rand(32))
    seed("too-short", 0, 0, 0, 0, b"")


if __name__ == "__main__":
    main()

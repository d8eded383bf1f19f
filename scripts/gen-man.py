#!/usr/bin/env python3
"""gen-man.py -- writes the manual pages from their sources of truth, so they cannot drift.

USAGE
  scripts/gen-man.py mailvault  BUILD/mailvault   man/mailvault.1.in  > mailvault.1
  scripts/gen-man.py mailvaultd BUILD/mailvaultd  man/mailvaultd.8.in > mailvaultd.8
  scripts/gen-man.py api        include/mailvault.h man/mailvault.3.in > mailvault.3

  mailvault(1): the command list of `mailvault help` and every command's `--help`, which
      the tool prints from its option tables (cli/cli_args.c, cli/cli_sql_options.c).
  mailvaultd(8): the settings `mailvaultd --help` prints from its config table
      (imapd/config.c).
  mailvault(3): include/mailvault.h, the header written as the library's manual: its
      opening comment, then one subsection per "---- Group ----" with every declaration and
      the comment above it.
  The template (man/*.in) holds the prose no table carries (environment, signals, files);
  @VERSION@, @COMMANDS@, @SETTINGS@ and @API@ are replaced.

  A command whose usage line names an option its --help does not list (or the reverse)
  stops the generation with exit 1: the synopsis and the parser disagree. The Makefile
  generates the pages at build time (build/man/), so a stale page cannot be installed.
"""
import os
import re
import subprocess
import sys


def esc(text):
    """Troff-escapes one line of text: backslashes, hyphens (minus signs, as options need), leading dots."""
    text = text.replace("\\", "\\e")
    text = text.replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"gen-man: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


# ---- mailvault(1) ---------------------------------------------------------------------------

OPTION_LINE = re.compile(r"^  (-\S+(?:, --\S+)?(?: [A-Z][A-Z0-9|-]*)?)\s{2,}(\S.*)$")


def parse_command_help(text):
    """Splits a command's --help into (usage lines, description lines, [(option, help)])."""
    lines = text.rstrip("\n").split("\n")
    if not lines or not lines[0].startswith("usage:"):
        raise ValueError("no usage line")
    usage = []
    i = 0
    if lines[0].strip() == "usage:":  # a list of sub-command usages
        i = 1
        while i < len(lines) and lines[i].startswith("  mailvault "):
            usage.append(lines[i].strip())
            i += 1
    else:
        usage.append(lines[0][len("usage: "):].strip())
        i = 1
        while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
            usage[-1] += " " + lines[i].strip()
            i += 1
    description, options = [], []
    in_options = False
    for line in lines[i:]:
        if line == "Options:":
            in_options = True
            continue
        if in_options:
            m = OPTION_LINE.match(line)
            if m:
                options.append((m.group(1), m.group(2)))
                continue
            if line.strip():
                raise ValueError(f"option line without help: {line!r}")
            in_options = False
            continue
        if not options:
            description.append(line)
    return usage, [d for d in description if d.strip()], options


def check_consistent(name, usage, options):
    """Every option a usage line names is listed, and every listed one appears in a usage."""
    named = set()
    for u in usage:
        named.update(re.findall(r"--[a-z][a-z-]*", u))
    listed = set()
    for opt, _ in options:
        listed.update(re.findall(r"--[a-z][a-z-]*", opt.split(" ")[0] if "," not in opt else opt))
    implicit = {"--help", "--root", "--password-file"}
    problems = []
    for o in sorted(named - listed):
        problems.append(f"{name}: the usage names {o}, which --help does not list")
    if not any("[OPTIONS]" in u for u in usage):
        for o in sorted(listed - named - implicit):
            problems.append(f"{name}: --help lists {o}, which the usage line does not name")
    return problems


def render_command(out, title, usage, description, options):
    out.append(f".SS {esc(title)}")
    out.append(".nf")
    for u in usage:
        out.append(esc(u if u.startswith("mailvault ") else "mailvault " + u))
    out.append(".fi")
    for d in description:
        out.append(esc(d.strip()))
    for opt, text in options:
        parts = opt.split(" ", 1)
        out.append(".TP")
        if len(parts) == 2 and not parts[0].endswith(","):
            out.append(f".BI \"{esc(parts[0])} \" {esc(parts[1])}")
        else:
            out.append(f".B {esc(opt)}")
        out.append(esc(text))


def gen_cli(binary):
    top = run([binary, "help"])
    commands = []
    for line in top.split("\n"):
        m = re.match(r"^  ([a-z]+)\s+(\S.*)$", line)
        if m and m.group(1) not in ("version", "help"):
            commands.append((m.group(1), m.group(2)))
    if not commands:
        sys.exit("gen-man: `mailvault help` lists no command")
    out, problems = [], []
    for name, summary in commands:
        usage, description, options = parse_command_help(run([binary, name, "--help"]))
        if not options:  # a command with sub-commands: each has its own --help
            out.append(f".SS {esc(name)}")
            out.append(esc(summary[0].upper() + summary[1:] + "."))
            for u in usage:
                sub = u.split()[2]
                su, sd, so = parse_command_help(run([binary, name, sub, "--help"]))
                problems += check_consistent(f"{name} {sub}", su, so)
                render_command(out, f"{name} {sub}", su, sd, so)
            continue
        problems += check_consistent(name, usage, options)
        description = [summary[0].upper() + summary[1:] + "."] + description
        render_command(out, name, usage, description, options)
    if problems:
        sys.exit("gen-man: " + "\ngen-man: ".join(problems))
    return {"COMMANDS": "\n".join(out)}


# ---- mailvaultd(8) --------------------------------------------------------------------------


def gen_server(binary):
    text = run([binary, "--help"])
    out = []
    in_settings = False
    for line in text.split("\n"):
        if line.startswith("Settings"):
            in_settings = True
            continue
        m = re.match(r"^  ([a-z_0-9]+)\s+(\S.*)$", line)
        if in_settings and m:
            out.append(".TP")
            out.append(f".B {m.group(1)}")
            out.append(esc(m.group(2)))
        elif in_settings and out:
            break
    if not out:
        sys.exit("gen-man: `mailvaultd --help` lists no setting")
    return {"SETTINGS": "\n".join(out)}


# ---- mailvault(3) ---------------------------------------------------------------------------


def comment_text(block):
    """The text of a /* ... */ block, without the markers and the leading ' * '."""
    body = []
    for line in block:
        line = line.strip()
        line = re.sub(r"^/\*+\s?", "", line)
        line = re.sub(r"\s*\*+/$", "", line)
        line = re.sub(r"^\*\s?", "", line)
        body.append(line)
    return body


def render_prose(out, lines):
    """Prose paragraphs; indented lines (lists, examples) stay as they are."""
    para = []
    for line in lines + [""]:
        if not line.strip():
            if para:
                out.append(".PP")
                out += para
                para = []
            continue
        if re.match(r"^[A-Z][A-Z ,/()-]+$", line.strip()) and len(line.strip()) > 3:
            if para:
                out.append(".PP")
                out += para
                para = []
            out.append(f".SS {esc(line.strip())}")
            continue
        if line.startswith("  "):
            if para:
                out.append(".PP")
                out += para
                para = []
            out.append(".nf")
            out.append(esc(line))
            out.append(".fi")
            continue
        para.append(esc(line))


def gen_api(header):
    src = open(header, encoding="utf-8").read().split("\n")
    # The opening comment is the DESCRIPTION.
    end = next(i for i, l in enumerate(src) if l.strip().endswith("*/"))
    intro = comment_text(src[1:end])
    intro = intro[1:] if intro and intro[0].startswith("mailvault.h") else intro
    out = [".SH DESCRIPTION"]
    render_prose(out, intro)
    i = end + 1
    # Skip the include guard and the attribute macros: the manual starts at the first group.
    while i < len(src) and not src[i].startswith("/* ----") and not src[i].startswith("/* ===="):
        i += 1
    strip = re.compile(r"\bMV_API\s+|\bMV_MUST_CHECK\s+")
    while i < len(src):
        line = src[i]
        if line.startswith("/* ===="):  # a part: /* ==== */ /* Title */ /* ==== */
            title = src[i + 1].strip().strip("/*").strip()
            out.append(f".SH {esc(title.upper())}")
            i += 3
            continue
        m = re.match(r"^/\* -+ (.*?) -*\s*\*/$", line)
        if m:
            out.append(f".SS {esc(m.group(1))}")
            i += 1
            continue
        if line.startswith("#ifdef __cplusplus") or line.startswith("#endif /* MAILVAULT_H"):
            break
        if line.startswith("/*"):  # a comment, and the declaration under it if any
            block = [line]
            while not block[-1].rstrip().endswith("*/"):
                i += 1
                block.append(src[i])
            i += 1
            code = []
            while i < len(src) and src[i].strip() and not src[i].startswith("/*"):
                code.append(strip.sub("", src[i]))
                i += 1
            if code:
                out.append(".PP")
                out.append(".nf")
                out += [esc(c) for c in code]
                out.append(".fi")
                out.append(".RS")
                render_prose(out, comment_text(block))
                out.append(".RE")
            else:
                render_prose(out, comment_text(block))
            continue
        if line.strip():
            code = []
            while i < len(src) and src[i].strip() and not src[i].startswith("/*"):
                code.append(strip.sub("", src[i]))
                i += 1
            out.append(".PP")
            out.append(".nf")
            out += [esc(c) for c in code]
            out.append(".fi")
            continue
        i += 1
    return {"API": "\n".join(out)}


def header_version():
    """MV_VERSION_STRING of include/mailvault.h, beside this script."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "mailvault.h")
    m = re.search(r'#define MV_VERSION_STRING "([^"]+)"', open(header, encoding="utf-8").read())
    return m.group(1)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("mailvault", "mailvaultd", "api"):
        sys.exit(__doc__)
    kind, source, template = sys.argv[1:]
    values = {"mailvault": gen_cli, "mailvaultd": gen_server, "api": gen_api}[kind](source)
    values["VERSION"] = header_version()
    text = open(template, encoding="utf-8").read()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    leftover = re.findall(r"@[A-Z]+@", text)
    if leftover:
        sys.exit(f"gen-man: {template}: nothing to put in {', '.join(leftover)}")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""commit-msg hook (.pre-commit-config.yaml): the subject line is at most 72 characters, and a
body, when there is one, is separated from it by a blank line."""

import sys

MAX_SUBJECT = 72


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if not line.startswith("#")]  # git's comment lines
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return 0  # git itself refuses an empty message
    subject = lines[0]
    if subject.startswith(("Merge ", "fixup! ", "squash! ", "amend! ", "Revert ")):
        return 0
    if len(subject) > MAX_SUBJECT:
        print(
            f"commit subject is {len(subject)} characters; keep it to {MAX_SUBJECT} and put the detail "
            f"in the body:\n  {subject}",
            file=sys.stderr,
        )
        return 1
    if len(lines) > 1 and lines[1].strip():
        print("leave a blank line between the commit subject and its body", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Whether the README's install commands resolve on a new user's machine: PyPI alone, no local wheel
folder, no pip configuration (PIP_CONFIG_FILE is the null device, so no file applies), an empty
HOME and cache. A dry run (`pip install --dry-run --ignore-installed`): nothing is installed.

    python maintenance/readme_install.py [--readme README.md]

Exit 0 when every `pip install` of the README's first bash block resolves; 1, with pip's reason,
when one does not. CI runs it before anything else (.ci/run).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASSED = ("PATH", "PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
"""What a new user's shell has too: the path, and how this network is reached and trusted (no
package source among them)."""


def install_commands(readme: str) -> list[list[str]]:
    """The arguments of every `pip install` in the README's first bash block."""
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = []
    for line in block.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part)
            if words[:2] == ["pip", "install"]:
                commands.append(words[2:])
    return commands


def isolated_env(home: str) -> dict[str, str]:
    """A new user's pip: no configuration file, an empty HOME, and the machine's own trust store
    (pip's bundled certificates know no network's own authority; a current pip reads the system's)."""
    env = {k: v for k, v in os.environ.items() if k in PASSED} | {"HOME": home, "PIP_CONFIG_FILE": os.devnull}
    system = ssl.get_default_verify_paths().cafile
    cert = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or system
    return env | ({"PIP_CERT": cert} if cert and os.path.exists(cert) else {})


def resolves(arguments: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as home:
        env = isolated_env(home)
        return subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", *arguments],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args()
    commands = install_commands(args.readme.read_text())
    if not commands:
        print(f"{args.readme}: no pip install in its first bash block", file=sys.stderr)
        return 1
    failed = 0
    for arguments in commands:
        result = resolves(arguments)
        said = "resolves" if result.returncode == 0 else "does NOT resolve"
        print(f"pip install {shlex.join(arguments)}: {said} with PyPI alone")
        if result.returncode:
            failed += 1
            print("\n".join(line for line in result.stderr.splitlines() if "notice" not in line)[-3000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

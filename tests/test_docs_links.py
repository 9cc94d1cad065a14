"""Every link the documentation makes resolves: a relative link in a Markdown file of the
project (README, docs/, results/) names a file that exists, and its #anchor a heading of it
(GitHub's slugs); every docs/*.md path named in the code, configs and docs exists."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    p for p in [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("results/**/*.md")] if p.is_file()
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED = re.compile(r"(?<![\w/.])(?<!--out )(docs/[\w/.-]+\.md)(#[\w-]+)?")  # not a file a script writes


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    lines = page.read_text().splitlines()
    return {slug(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


def test_the_heading_slugs_are_githubs():
    assert slug("The zoo: the field's baselines beside GRPO") == "the-zoo-the-fields-baselines-beside-grpo"
    assert slug("`harness show`: a run's completions") == "harness-show-a-runs-completions"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_page_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_every_docs_page_named_in_the_project_exists():
    files = [p for ext in ("py", "yaml", "md") for p in ROOT.glob(f"**/*.{ext}") if ".git" not in p.parts]
    files = [p for p in files if "runs" not in p.relative_to(ROOT).parts[:1] and ".cache" not in p.parts]
    missing = []
    for file in files:
        for path, anchor in NAMED.findall(file.read_text(errors="replace")):
            target = ROOT / path
            if not target.is_file():
                missing.append(f"{file.relative_to(ROOT)}: {path}")
            elif anchor and anchor[1:] not in anchors(target):
                missing.append(f"{file.relative_to(ROOT)}: {path}{anchor}")
    assert not missing, "\n".join(missing)

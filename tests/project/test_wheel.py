"""The wheel stands alone: built from the sources and installed in a fresh environment outside
the repository (against the torch already installed), it carries the license, the project links
and the presets, its README (the package description) links only absolute URLs, and its CLI
runs. Also: LICENSE and CITATION.cff agree with pyproject and the version, and the README's test
command is the one CI runs with the full extras."""

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BASE = "https://github.com/rnnlab/rnnlab"


def test_license_file_is_the_declared_license():
    assert PROJECT["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text


def test_project_urls_point_at_the_repository():
    urls = PROJECT["urls"]
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith(BASE) for u in urls.values())
    from rnnlab.cli import DOCS_URL

    assert DOCS_URL.startswith(urls["Repository"] + "/")  # --help points into the same repository


def test_citation_cff_names_the_version_and_the_four_papers():
    import rnnlab

    text = (ROOT / "CITATION.cff").read_text()
    assert re.search(rf"^version: {re.escape(rnnlab.__version__)}$", text, re.M)
    assert re.search(r"^license: MIT$", text, re.M) and f'repository-code: "{BASE}"' in text
    arxiv = re.findall(r"value: 10\.48550/arXiv\.(\d{4}\.\d{5})", text)
    assert sorted(arxiv) == ["1602.06662", "1905.12080", "2105.14092", "2304.11790"]


def test_readme_cites_the_four_papers_and_links_absolutely():
    readme = (ROOT / "README.md").read_text()
    for arxiv in ("2304.11790", "1602.06662", "2105.14092", "1905.12080"):
        assert readme.count(f"https://arxiv.org/abs/{arxiv}") >= 2, arxiv  # linked at the top and cited
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [t for t in targets if not t.startswith(("https://", "#"))]
    assert targets and not relative, relative
    for t in targets:
        if t.startswith(BASE + "/blob/main/") or t.startswith(BASE + "/tree/main/"):
            path = t.split("/main/", 1)[1].split("#")[0]
            assert (ROOT / path).exists(), t  # the absolute link names a file of this repository
        elif t.startswith("https://raw.githubusercontent.com/rnnlab/rnnlab/main/"):
            assert (ROOT / t.split("/main/", 1)[1]).exists(), t


def test_ci_runs_the_readmes_full_test_command():
    readme = (ROOT / "README.md").read_text()
    second = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()[1]
    assert '".[test-full]"' in second and second in (ROOT / ".ci" / "run").read_text()
    extras = PROJECT["optional-dependencies"]
    light = {re.split(r"[=<>;]", d)[0] for d in extras["test"]}
    full = {re.split(r"[=<>;\[]", d)[0] for d in extras["test-full"]}
    engines = {"optuna", "ray", "triton", "tensorboard", "pdoc"}
    assert not light & engines and engines <= full and "rnnlab" in full  # test-full = rnnlab[test] + engines


def _build_wheel(out: Path) -> Path:
    """The wheel, built from a copy of the sources (the checkout stays untouched)."""
    src = out / "src-copy"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (out / "dist").glob("rnnlab-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_installed_outside_the_repo(tmp_path):
    import rnnlab

    wheel = _build_wheel(tmp_path)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    py = env_dir / "bin" / "python"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # torch, numpy, ... from this environment: a path line, not its .pth files (no editable rnnlab)
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "deps-of-the-test.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    probe = (
        "import json, importlib.metadata as md, rnnlab, rnnlab.config as c, rnnlab.suite as s\n"
        "dist = md.distribution('rnnlab')\n"
        "meta = dist.metadata\n"
        "files = [str(f) for f in dist.files]\n"
        "print(json.dumps({'file': rnnlab.__file__, 'version': meta['Version'],\n"
        "  'license': meta.get('License'), 'urls': meta.get_all('Project-URL'),\n"
        "  'license_files': [f for f in files if f.endswith('LICENSE')],\n"
        "  'typed': [f for f in files if f.endswith('rnnlab/py.typed')],\n"
        "  'description': meta.get_payload() or meta.get('Description') or '',\n"
        "  'presets': c.list_presets(), 'suites': s.list_suites(),\n"
        "  'small_c': __import__('rnnlab.kernels.small', fromlist=['SOURCE']).SOURCE.is_file()}))\n"
    )
    r = subprocess.run([str(py), "-c", probe], cwd=work, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads(r.stdout)
    assert info["file"].startswith(str(env_dir)), info["file"]  # the wheel, not the checkout
    assert info["version"] == rnnlab.__version__ and info["license"] == "MIT"
    assert info["license_files"], "LICENSE is not in the wheel"
    assert info["typed"], "py.typed is not in the wheel: type checkers would ignore rnnlab's annotations"
    urls = dict(u.split(", ", 1) for u in info["urls"])
    assert urls["Repository"] == BASE and urls["Issues"] == BASE + "/issues"
    assert "demo/asrnn" in info["presets"] and "nnrnn/copy" in info["presets"] and "demo" in info["suites"]
    assert info["small_c"], "the C source of rnnlab.kernels.small is not in the wheel (package-data)"
    description = info["description"]
    assert "Citing" in description and not re.findall(r"\]\((?!https://|#)", description)
    r = subprocess.run(
        [str(env_dir / "bin" / "rnnlab"), "list", "presets"], cwd=work, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and "demo/asrnn" in r.stdout, r.stderr[-2000:]

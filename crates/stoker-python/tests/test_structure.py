"""The checker `make lint` runs (tools/check_structure.py) finds what it is for: an import
circle between a crate's modules, through `use`, `super::` and a re-export, and a function
over the line limit; and it passes a crate whose imports run one way."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("check_structure", REPO / "tools" / "check_structure.py")
assert spec is not None and spec.loader is not None
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def _crate(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp / "src" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp / "src"


def test_a_circle_through_a_reexport_and_super_is_found(tmp_path: Path) -> None:
    src = _crate(
        tmp_path,
        {
            "lib.rs": "pub mod plan;\npub mod ops;\npub use plan::Plan;\n",
            "plan.rs": "pub struct Plan;\npub fn f() { crate::ops::batch::run(); }\n",
            "ops/mod.rs": "pub mod batch;\npub fn helper() {}\n",
            # A comment naming crate::plan is not an import; the re-exported Plan is.
            "ops/batch.rs": "// crate::plan::nothing\nuse crate::Plan;\npub fn run() { super::helper(); }\n",
        },
    )
    found = check.cycles(check.rust_graph(src))
    assert found == [[("ops", "batch"), ("plan",)]]


def test_imports_one_way_pass(tmp_path: Path) -> None:
    src = _crate(
        tmp_path,
        {
            "lib.rs": "pub mod plan;\npub mod ops;\n",
            "plan.rs": "pub struct Plan;\n#[cfg(test)]\nmod tests { use crate::ops::run; }\n",
            "ops.rs": 'use crate::plan::Plan;\npub fn run(_: Plan) { let _ = "crate::ops"; }\n',
        },
    )
    assert check.cycles(check.rust_graph(src)) == []


def test_long_functions_are_measured_outside_tests(tmp_path: Path) -> None:
    body = "\n".join(f"    let x{i} = {i};" for i in range(130))
    f = tmp_path / "a.rs"
    tests = f"#[cfg(test)]\nmod tests {{\n    fn t() {{\n{body}\n    }}\n}}\n"
    f.write_text(f"fn long() {{\n{body}\n}}\nfn short() -> u8 {{ 1 }}\n{tests}")
    sizes = {name: n for name, _, n in check.rust_functions(f)}
    assert sizes == {"long": 132, "short": 1}

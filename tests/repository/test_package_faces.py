"""One convention for package faces: every ``__init__.py`` of the library and the experiments says what its
package holds (a docstring) and defines nothing. Definitions live in named modules; a face may re-export the
names callers import from the package itself (``config``, ``models``, ``convert``, ``cli``, ...)."""

from __future__ import annotations

import ast

from tests.support import REPO_ROOT


def test_every_package_face_has_a_docstring_and_defines_nothing():
    problems = []
    for face in sorted([*(REPO_ROOT / "megatron_crossbert").rglob("__init__.py"),
                        *(REPO_ROOT / "experiments").rglob("__init__.py")]):
        tree, name = ast.parse(face.read_text()), face.relative_to(REPO_ROOT)
        if not ast.get_docstring(tree):
            problems.append(f"{name}: no docstring saying what the package holds")
        defined = [node.name for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assigned = [target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
                    if isinstance(target, ast.Name) and not target.id.startswith("__")]  # __all__, __version__
        if defined or assigned:
            problems.append(f"{name}: defines {', '.join(defined + assigned)} (move it into a named module)")
    assert problems == []

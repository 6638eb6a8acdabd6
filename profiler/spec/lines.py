"""Where in a spec's YAML a value is: line numbers by key path, so that an error names the line it is about."""

from __future__ import annotations

from typing import Any

import yaml

# PyYAML's C loader where it is built, else the pure-Python one.
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Each mapping key / sequence item of a YAML document → its 1-based line."""
    try:
        root = yaml.compose(text, Loader=FAST_LOADER)
    except yaml.YAMLError:
        return {}
    return node_lines(root)


def node_lines(root: yaml.Node | None) -> dict[tuple[Any, ...], int]:
    """`yaml_lines` of a document already composed."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return lines


def yaml_line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    """The YAML line of the spec location ``loc`` (or of its nearest parent the document has)."""
    for n in range(len(loc), -1, -1):  # a scalar axis becomes a list: fall back to its key
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None

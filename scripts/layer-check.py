#!/usr/bin/env python3
"""The layer check: the import edges of `src/` against ARCHITECTURE.md's floors.

Reads every file of `src/` except `src/bin/` (the top floor, which may import
anything in the library) and collects its import edges: each `use` of a path
in this crate (`crate::`, `super::`, `self::` or a child module's name) and
each inline `crate::a::b` / `super::a` path in code. Comments, strings and
`#[cfg(test)]` items (test code may reach anywhere) are not read. A path is
followed through `use` re-exports to the file that defines the item, so
`use super::Verdict` in `free_tier/future.rs` is an edge to
`free_tier::window`; a module's own `pub use child::Item` (its façade) is no
edge.

It fails (exit 1), naming each offending edge with its file and line, when
- a top-level module imports one on a higher floor (floors: the fenced block
  under "## Floors" in ARCHITECTURE.md, one `floor: module …` line per floor,
  top floor first; `crate` stands for lib.rs's own items), or a top-level
  module of `src/` is on no floor;
- files import each other in a circle, unless the circle's files are all
  `layer.rs`/`service.rs`/`future.rs` of one folder and include both
  `layer.rs` and `service.rs` (a layer and its service name each other);
- top-level modules import each other in a circle;
- a public item is reachable by two paths from the crate root (ARCHITECTURE.md:
  one path per public name): public modules are `pub mod` (not `pub(crate)`),
  public items are `pub` items at a module's top level (`pin_project!` ones
  too) and `pub use` leaves, followed to the item they name;
- a layer out of ARCHITECTURE.md's module rule: `impl Layer<S> for FooLayer`
  whose service is not `Foo<S>`, whose service's future is not its module's
  `ResponseFuture` (nor the inner service's `S::Future`; `OTHER_FUTURES` names
  the exceptions, with why), or without `Foo::layer(..) -> FooLayer` (nor a
  builder);
- the files of an example of several files (`examples/<name>/main.rs` and
  the modules it declares, `#[path]` ones included) import each other in a
  circle: the examples sit above every floor, so only circles are checked.

`--self-test` runs the check on a copy of `src/` and ARCHITECTURE.md: the copy
must pass, and fail once a cycle, an upward import, then a second path to a
public item, is planted in it.
Python 3 standard library only.
"""

import argparse
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYER_PAIR = {"layer.rs", "service.rs", "future.rs"}
TRANSPARENT_MACROS = {"pin_project"}
ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}

# Circles known and not yet fixed, by folder: a circle whose files all lie in
# one of these folders is printed as a warning, not a failure. The fix is
# written beside each; once a folder has no circle left the check fails until
# its line is removed, so this list cannot outlive its circles.
KNOWN_CYCLES = {
    # A folder named here warns instead of failing while it still has a circle;
    # the check fails once the circle is gone, so an entry cannot linger.
}

# ---------------------------------------------------------------- tokens


TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_string>b?r(?P<hashes>\#*)")
  | (?P<string>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])')
  | (?P<lifetime>'[A-Za-z_]\w*)
  | (?P<ident>r\#[A-Za-z_]\w*|[A-Za-z_]\w*)
  | (?P<number>\d[\w]*)
  | (?P<path_sep>::)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text):
    """(token, line) pairs; comments, strings and literals dropped."""
    tokens = []
    pos, line = 0, 1
    while pos < len(text):
        m = TOKEN.match(text, pos)
        kind = m.lastgroup if m.lastgroup != "hashes" else "raw_string"
        end = m.end()
        if kind == "block_comment":
            depth, end = 1, m.end()
            while depth and end < len(text):
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw_string":
            close = '"' + m.group("hashes")
            found = text.find(close, m.end())
            end = len(text) if found < 0 else found + len(close)
        elif kind in ("ident", "path_sep", "punct"):
            token = m.group(0)
            tokens.append((token[2:] if token.startswith("r#") else token, line))
        line += text.count("\n", pos, end)
        pos = end
    return tokens


# ---------------------------------------------------------------- parsing


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names; () is the crate root
        self.file = file  # the file that holds it (inline modules: their file)
        self.children = set()  # declared `mod` names
        self.imports = {}  # name -> absolute path (any `use` in the module)
        self.public = False  # declared `pub mod` (not `pub(crate)`)
        self.pub_items = set()  # names of items declared `pub` at its top level
        self.pub_uses = {}  # name -> absolute path, for each `pub use` leaf


class Reference:
    def __init__(self, module, path, line, facade):
        self.module = module  # Module the reference sits in
        self.path = path  # absolute path (tuple)
        self.line = line
        self.facade = facade  # a `pub use` (re-export)


def is_cfg_test(attr):
    """`#[cfg(test)]`, or a cfg whose `all(..)` starts with test."""
    words = [t for t, _ in attr]
    return words[:3] == ["cfg", "(", "test"] or words[:5] == ["cfg", "(", "all", "(", "test"]


def skip_item(tokens, i):
    """Index after the item starting at i (ends at `;` or its closing brace)."""
    depth = 0
    while i < len(tokens):
        t = tokens[i][0]
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        elif t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif t == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def matching(tokens, i):
    """Index after the bracket that closes the one at i."""
    depth = 0
    while i < len(tokens):
        t = tokens[i][0]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def parse_use_tree(tokens, i, prefix, out):
    """Appends (segments, alias, line) for each leaf of the tree at i."""
    segments = list(prefix)
    if tokens[i][0] == "::":
        i += 1
    while i < len(tokens):
        t, line = tokens[i]
        if t == "{":
            i += 1
            while tokens[i][0] != "}":
                i = parse_use_tree(tokens, i, segments, out)
                if tokens[i][0] == ",":
                    i += 1
            return i + 1
        if t == "*":
            out.append((segments + ["*"], None, line))
            return i + 1
        segments.append(t)
        i += 1
        if i < len(tokens) and tokens[i][0] == "::":
            i += 1
            continue
        alias = None
        if i < len(tokens) and tokens[i][0] == "as":
            alias = tokens[i + 1][0]
            i += 2
        out.append((segments, alias, line))
        return i
    return i


class Crate:
    def __init__(self, src, root_file="lib.rs"):
        self.src = src
        self.modules = {}
        self.references = []
        self.file_module = {}  # file -> module path of the file
        self.test_files = set()
        self.path_attrs = {}  # file -> {line: the path of a `#[path = "…"]` on it}
        root = Module((), src / root_file)
        self.modules[()] = root
        self.parse_file(src / root_file, root)

    def child_file(self, module, name, path_attr=None):
        file = module.file
        if path_attr is not None:  # `#[path = "…"] mod name;`, beside the declaring file
            candidate = (file.parent / path_attr).resolve()
            return candidate if candidate.exists() else None
        if file.name in ("lib.rs", "mod.rs") or file == self.modules[()].file:
            base = file.parent
        else:
            base = file.parent / file.stem
        for candidate in (base / f"{name}.rs", base / name / "mod.rs"):
            if candidate.exists():
                return candidate
        return None

    def parse_file(self, file, module):
        self.file_module[file] = module.path
        text = file.read_text()
        self.path_attrs[file] = {
            text.count("\n", 0, m.start()) + 1: m.group(1)
            for m in re.finditer(r'#\[path\s*=\s*"([^"]*)"\s*\]', text)
        }
        tokens = tokenize(text)
        self.parse_block(tokens, 0, len(tokens), module)

    def parse_block(self, tokens, i, end, module):
        pending_test = False
        pending_path = None
        # Braces of impls, fns and macros: their `pub` items are no module items,
        # but for `pin_project! { .. }`, which declares its items as written.
        braces = []
        depth = 0
        while i < end:
            t, line = tokens[i]
            if t == "{":
                transparent = i >= 2 and tokens[i - 1][0] == "!" and tokens[i - 2][0] in TRANSPARENT_MACROS
                braces.append(transparent)
                depth += 0 if transparent else 1
            elif t == "}":
                depth -= 0 if braces and braces.pop() else 1
            elif t == "pub" and depth == 0 and i + 1 < end and tokens[i + 1][0] != "(":
                j = i + 1
                while j < end and tokens[j][0] in ("async", "unsafe", "extern", "const") and tokens[j + 1][0] not in (":",):
                    if tokens[j][0] == "const" and tokens[j + 1][0] not in ("fn", "unsafe", "async"):
                        break
                    j += 1
                    if tokens[j - 1][0] == "extern" and tokens[j][0].startswith('"'):
                        j += 1
                if tokens[j][0] in ITEM_KEYWORDS and j + 1 < end:
                    module.pub_items.add(tokens[j + 1][0])
            if t == "#" and i + 1 < end and tokens[i + 1][0] in ("[", "!"):
                inner = tokens[i + 1][0] == "!"
                start = i + (3 if inner else 2)
                close = matching(tokens, start - 1)
                attr = tokens[start : close - 1]
                if is_cfg_test(attr):
                    if inner:  # the whole enclosing block is test code
                        return
                    pending_test = True
                elif not inner and [a for a, _ in attr[:2]] == ["path", "="]:
                    pending_path = self.path_attrs.get(module.file, {}).get(line)
                i = close
                continue
            if pending_test:
                # `#[cfg(test)] mod name;`: the whole file is test code.
                if t == "mod" and tokens[i + 2][0] == ";":
                    child = self.child_file(module, tokens[i + 1][0], pending_path)
                    if child:
                        self.test_files.add(child)
                i = skip_item(tokens, i)
                pending_test = False
                pending_path = None
                continue
            if t == "mod" and i + 2 < end and tokens[i + 2][0] in (";", "{"):
                name = tokens[i + 1][0]
                module.children.add(name)
                path = module.path + (name,)
                public = i > 0 and tokens[i - 1][0] == "pub"
                if tokens[i + 2][0] == ";":
                    child_file = self.child_file(module, name, pending_path)
                    pending_path = None
                    if child_file is not None:
                        child = Module(path, child_file)
                        child.public = public
                        self.modules[path] = child
                        self.parse_file(child_file, child)
                    i += 3
                else:
                    close = skip_item(tokens, i)
                    child = Module(path, module.file)
                    child.public = public
                    self.modules[path] = child
                    self.parse_block(tokens, i + 3, close - 1, child)
                    i = close
                continue
            if t == "use":
                facade = i > 0 and (
                    tokens[i - 1][0] == "pub" or (tokens[i - 1][0] == ")" and tokens[i - 4][0] == "pub")
                )
                leaves = []
                use_start = i
                i = parse_use_tree(tokens, i + 1, [], leaves)
                for segments, alias, use_line in leaves:
                    if segments[-1] == "self":
                        segments = segments[:-1]
                    path = self.absolute(module, segments)
                    if path is None:
                        continue
                    name = alias or segments[-1]
                    if segments[-1] != "*" and name != "_":
                        module.imports[name] = path
                        if depth == 0 and tokens[use_start - 1][0] == "pub":
                            module.pub_uses[name] = path
                    self.references.append(Reference(module, path, use_line, facade))
                continue
            if t in ("crate", "super", "self") and i + 1 < end and tokens[i + 1][0] == "::":
                segments = [t]
                j = i + 1
                while j + 1 < end and tokens[j][0] == "::" and re.match(r"\w", tokens[j + 1][0]):
                    segments.append(tokens[j + 1][0])
                    j += 2
                path = self.absolute(module, segments)
                if path is not None:
                    self.references.append(Reference(module, path, line, False))
                i = j
                continue
            i += 1

    def absolute(self, module, segments):
        """The path from the crate root, or None for another crate's path."""
        if not segments:
            return None
        head, rest = segments[0], segments[1:]
        if head == "crate":
            return tuple(rest)
        if head == "self":
            return module.path + tuple(rest)
        if head == "super":
            path = module.path
            while segments and segments[0] == "super":
                path = path[:-1]
                segments = segments[1:]
            return path + tuple(segments)
        if head in module.children:
            return module.path + tuple(segments)
        return None

    def resolve(self, path, depth=0):
        """The module that defines what `path` names."""
        current = ()
        for index, segment in enumerate(path):
            module = self.modules.get(current)
            if module is None or segment == "*":
                return current
            if segment in module.children:
                current = current + (segment,)
                continue
            if segment in module.imports and depth < 20:
                target = module.imports[segment] + tuple(path[index + 1 :])
                if target != path:
                    return self.resolve(target, depth + 1)
            return current
        return current


# ---------------------------------------------------------------- public paths


def definition(crate, path, depth=0):
    """What a path names, followed through `use`: ("module", path) or ("item", module, name)."""
    module = crate.modules.get(path[:-1])
    # `use a::b` names an item b of a before a module b of a (a function and
    # its private module of one name, as `envelope::redact`).
    if module is not None and path[-1] in module.pub_items:
        return ("item", module.path, path[-1])
    if module is not None and path[-1] in module.imports and module.imports[path[-1]] != path and depth < 20:
        return definition(crate, module.imports[path[-1]], depth + 1)
    if path in crate.modules:
        return ("module", path)
    if module is None:
        # A path through a re-exported module: resolve the prefix first.
        if len(path) > 1 and depth < 20:
            prefix = definition(crate, path[:-1], depth + 1)
            if prefix and prefix[0] == "module" and prefix[1] != path[:-1]:
                return definition(crate, prefix[1] + path[-1:], depth + 1)
        return None
    name = path[-1]
    if name in module.pub_items:
        return ("item", module.path, name)
    if name in module.imports and depth < 20 and module.imports[name] != path:
        return definition(crate, module.imports[name], depth + 1)
    return ("item", module.path, name)


def public_paths(crate):
    """{definition: [every path from the crate root that names it publicly]}."""
    paths = defaultdict(list)
    seen = set()

    def walk(module_path, shown):
        if module_path in seen:
            return
        seen.add(module_path)
        module = crate.modules[module_path]
        for name in sorted(module.pub_items):
            paths[("item", module_path, name)].append(shown + (name,))
        for name in sorted(module.children):
            child = crate.modules.get(module_path + (name,))
            if child is not None and child.public:
                paths[("module", child.path)].append(shown + (name,))
                walk(child.path, shown + (name,))
        for name, target in sorted(module.pub_uses.items()):
            found = definition(crate, target)
            if found is not None:
                paths[found].append(shown + (name,))

    walk((), ())
    return paths


def check_public_paths(root):
    """One violation per public item reachable by two paths (ARCHITECTURE.md: one path per public name)."""
    crate = Crate(root / "src")
    problems = []
    paths = public_paths(crate)
    for found, shown in sorted(paths.items()):
        unique = sorted(set(shown))
        if len(unique) > 1:
            names = ", ".join("walletgate::" + "::".join(p) for p in unique)
            problems.append(f"public item reachable by {len(unique)} paths: {names}")
    return problems, len(paths)


# ---------------------------------------------------------------- layer modules

LAYER_IMPL = re.compile(r"impl<S\b[^{]*?>\s+Layer<S>\s+for\s+(\w+)(?:<[^{]*>)?\s*\{\s*type\s+Service\s*=\s*(\w+)\s*<", re.S)
SERVICE_FUTURE = r"impl<[^{]*>\s+Service<[^{]*>\s+for\s+NAME\s*<[^{]*\{.*?type\s+Future\s*=\s*([\w:]+)"

# Services whose future is not their module's `ResponseFuture`, with why. A
# pass-through service (its future is the inner one's, `S::Future`) needs none.
OTHER_FUTURES = {
    # wallet_jwt holds two layers: WalletJwt's future is the module's
    # `ResponseFuture`, the scope gate beside it names its own.
    "RequireScopes": "RequireScopesFuture",
}


def check_layer_modules(root):
    """The layers of src/ against ARCHITECTURE.md's "Layer modules": `FooLayer`
    makes `Foo<S>`, whose future is its module's `ResponseFuture` (or the inner
    service's), and `Foo::layer(..)` makes `FooLayer`."""
    problems, layers = [], []
    src = root / "src"
    files = {f: strip_comments(f.read_text()) for f in sorted(src.rglob("*.rs"))}
    text_all = "\n".join(files.values())
    for file, text in files.items():
        for m in LAYER_IMPL.finditer(text):
            layer, service = m.group(1), m.group(2)
            where = f"{file.relative_to(root).as_posix()}: {layer}"
            layers.append(f"{layer} -> {service}")
            if layer != service + "Layer":
                problems.append(f"layer rule: {where} makes {service}, not {layer.removesuffix('Layer')}")
                continue
            future = re.search(SERVICE_FUTURE.replace("NAME", re.escape(service)), text_all, re.S)
            if future is None:
                problems.append(f"layer rule: {where}: no `impl Service for {service}` with a `type Future`")
            else:
                expected = OTHER_FUTURES.get(service, "ResponseFuture")
                if future.group(1) not in (expected, "S::Future"):
                    problems.append(f"layer rule: {where}: {service}'s future is {future.group(1)}, not {expected}")
            constructor = re.search(
                r"impl(?:<[^{]*>)?\s+" + re.escape(service) + r"<\(\)[^{]*\{[^}]*?pub fn layer\([^)]*\)\s*->\s*" + re.escape(layer),
                text_all,
                re.S,
            )
            if constructor is None and not re.search(r"pub fn builder\(\)", text_all[text_all.find(f"impl {layer}"):][:4000]):
                problems.append(f"layer rule: {where}: no `{service}::layer(..) -> {layer}` (nor a builder)")
    return problems, layers


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


# ---------------------------------------------------------------- floors


def read_floors(architecture):
    """[(floor, [modules])], top floor first, from the block under ## Floors."""
    text = architecture.read_text()
    section = re.search(r"^## Floors\s*$(.*?)^## ", text, re.M | re.S)
    if not section:
        raise SystemExit(f"layer-check: {architecture}: no '## Floors' section")
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), re.M | re.S)
    if not block:
        raise SystemExit(f"layer-check: {architecture}: no fenced block under '## Floors'")
    floors = []
    for raw in block.group(1).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, modules = line.partition(":")
        if not sep or not re.fullmatch(r"[\w-]+", name.strip()):
            raise SystemExit(f"layer-check: {architecture}: not a 'floor: module …' line: {raw!r}")
        floors.append((name.strip(), modules.split()))
    return floors


# ---------------------------------------------------------------- the check


def display(path):
    return "::".join(path) if path else "crate"


def top(path):
    return path[0] if path else "crate"


def strongly_connected(nodes, edges):
    """Tarjan's components with more than one node."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return result


def is_layer_pair(files):
    names = {f.name for f in files}
    return len({f.parent for f in files}) == 1 and names <= LAYER_PAIR and {"layer.rs", "service.rs"} <= names


def collect_file_edges(crate):
    """file -> {file: [(line, target module)]}: the non-test import edges."""
    file_edges = defaultdict(lambda: defaultdict(list))
    for ref in crate.references:
        source = ref.module.file
        if source in crate.test_files:
            continue
        target_module = crate.resolve(ref.path)
        target = crate.modules[target_module].file if target_module in crate.modules else None
        if target is None or target == source:
            continue
        own = ref.module.path
        if ref.facade and target_module[: len(own)] == own:
            continue  # a module's façade re-exporting its own children
        file_edges[source][target].append((ref.line, target_module))
    return file_edges


def example_crates(root):
    """(name, Crate) for each example of several files: `examples/<name>/main.rs`."""
    examples = root / "examples"
    if not examples.is_dir():
        return []
    return [
        (main.parent.name, Crate(main.parent, "main.rs"))
        for main in sorted(examples.glob("*/main.rs"))
    ]


def check_examples(root):
    """Import circles between the files of each example (test files not read).

    The examples sit above every floor, so only circles are checked: an
    example is wiring, and wiring imports downwards, never in a circle.
    """
    problems, files, edge_count = [], 0, 0

    def rel(file):
        return file.resolve().relative_to(root.resolve()).as_posix()

    for name, crate in example_crates(root):
        file_edges = collect_file_edges(crate)
        files += len(crate.file_module) - len(crate.test_files)
        edge_count += sum(len(t) for t in file_edges.values())
        edges = {s: set(t) for s, t in file_edges.items()}
        for component in strongly_connected(set(crate.file_module), edges):
            members = set(component)
            lines = []
            for s in component:
                for t in sorted(edges.get(s, ())):
                    if t in members:
                        line, module = file_edges[s][t][0]
                        lines.append(f"  {rel(s)}:{line} -> {display(module)}")
            names = ", ".join(rel(f) for f in component)
            problems.append(f"import cycle in example {name} between files {names}:\n" + "\n".join(lines))
    return problems, files, edge_count


def check(root):
    """The violations (one message each) of the tree at root."""
    src = root / "src"
    crate = Crate(src)
    floors = read_floors(root / "ARCHITECTURE.md")
    floor_of = {}
    problems = []
    warnings = []
    for rank, (floor, modules) in enumerate(floors):
        for module in modules:
            if module in floor_of:
                problems.append(f"ARCHITECTURE.md: module {module} is on two floors")
            floor_of[module] = (rank, floor)
    tops = {top(path) for path in crate.modules}
    for module in sorted(tops - set(floor_of)):
        problems.append(f"ARCHITECTURE.md: module {module} (src/) is on no floor")
    for module in sorted(set(floor_of) - tops):
        problems.append(f"ARCHITECTURE.md: floor module {module} is not a module of src/")

    def rel(file):
        return file.relative_to(root).as_posix()

    file_edges = collect_file_edges(crate)
    file_node = {file: path for file, path in crate.file_module.items()}

    def edge_text(source, target):
        line, module = file_edges[source][target][0]
        return f"{rel(source)}:{line} -> {display(module)}"

    # Floors: a lower floor never imports a higher one.
    for source in sorted(file_edges):
        for target in sorted(file_edges[source]):
            src_top, dst_top = top(file_node[source]), top(file_node[target])
            if src_top not in floor_of or dst_top not in floor_of:
                continue
            (src_rank, src_floor), (dst_rank, dst_floor) = floor_of[src_top], floor_of[dst_top]
            if dst_rank < src_rank:
                for line, module in file_edges[source][target]:
                    problems.append(
                        f"upward import: {rel(source)}:{line} -> {display(module)} "
                        f"({src_top} on floor '{src_floor}' imports {dst_top} on floor '{dst_floor}' above it)"
                    )

    # Circles between files.
    edges = {s: set(t) for s, t in file_edges.items()}
    known_seen = set()
    for component in strongly_connected(set(file_node), edges):
        if is_layer_pair(component):
            continue
        folders = {rel(f).rsplit("/", 1)[0] + "/" for f in component}
        if len(folders) == 1 and folders <= set(KNOWN_CYCLES):
            folder = folders.pop()
            known_seen.add(folder)
            warnings.append(f"known import cycle in {folder} ({KNOWN_CYCLES[folder]}): {len(component)} files")
            continue
        members = set(component)
        lines = [
            "  " + edge_text(s, t)
            for s in component
            for t in sorted(edges.get(s, ()))
            if t in members
        ]
        names = ", ".join(rel(f) for f in component)
        problems.append(f"import cycle between files {names}:\n" + "\n".join(lines))

    for folder in sorted(set(KNOWN_CYCLES) - known_seen):
        problems.append(f"no import cycle left in {folder}: remove it from KNOWN_CYCLES in scripts/layer-check.py")

    # Circles between top-level modules.
    top_edges = defaultdict(lambda: defaultdict(list))
    for source, targets in file_edges.items():
        for target in targets:
            a, b = top(file_node[source]), top(file_node[target])
            if a != b:
                top_edges[a][b].append((source, target))
    tops_graph = {a: set(b) for a, b in top_edges.items()}
    for component in strongly_connected(tops, tops_graph):
        members = set(component)
        lines = [
            "  " + edge_text(*top_edges[a][b][0])
            for a in component
            for b in sorted(tops_graph.get(a, ()))
            if b in members
        ]
        problems.append(f"import cycle between modules {', '.join(component)}:\n" + "\n".join(lines))

    summary = (
        f"{len(file_node) - len(crate.test_files)} files, "
        f"{sum(len(t) for t in file_edges.values())} file edges, "
        f"{len(floors)} floors"
    )
    return problems, warnings, summary, crate, file_edges


def run(root):
    problems, warnings, summary, _, _ = check(root)
    path_problems, public_count = check_public_paths(root)
    problems += path_problems
    summary += f"; {public_count} public names"
    layer_problems, layers = check_layer_modules(root)
    problems += layer_problems
    summary += f"; {len(layers)} layers ({', '.join(layers)})"
    example_problems, example_files, example_edges = check_examples(root)
    problems += example_problems
    summary += f"; examples: {example_files} files, {example_edges} file edges"
    for warning in warnings:
        print(f"layer-check: warning: {warning}")
    for problem in problems:
        print(f"layer-check: {problem}")
    if problems:
        print(f"layer-check: {len(problems)} violation(s) ({summary})")
        return 1
    print(
        f"layer-check: ok ({summary}; no upward import, no import cycle but layer/service pairs, "
        "none in the examples, one path per public name, every layer in the module rule)"
    )
    return 0


# ---------------------------------------------------------------- self-test


def self_test():
    failures = []

    def copy():
        tmp = Path(tempfile.mkdtemp(prefix="layer-check-"))
        shutil.copytree(REPO / "src", tmp / "src")
        shutil.copy(REPO / "ARCHITECTURE.md", tmp / "ARCHITECTURE.md")
        return tmp

    def expect(name, root, fails, needle, checked=lambda root: check(root)[0]):
        problems = checked(root)
        print(f"--- self-test: {name}: {len(problems)} violation(s)")
        for problem in problems:
            print("    " + problem.replace("\n", "\n    "))
        if fails and not any(needle in p for p in problems):
            failures.append(f"{name}: expected a violation containing {needle!r}")
        if not fails and problems:
            failures.append(f"{name}: expected no violation")
        shutil.rmtree(root)

    def plant(root, file, text):
        with open(root / file, "a") as f:
            f.write(text)

    expect("untouched copy", copy(), False, "")

    # A cycle: an existing edge between two files of one module that are no
    # layer/service pair, closed by an import back.
    root = copy()
    _, _, _, crate, file_edges = check(root)
    source, target = next(
        (s, t)
        for s in sorted(file_edges)
        for t in sorted(file_edges[s])
        if crate.file_module[s][:1] == crate.file_module[t][:1] and not is_layer_pair([s, t])
    )
    back = "crate::" + display(crate.file_module[source]) if crate.file_module[source] else "crate"
    plant(root, target.relative_to(root), f"\n#[allow(unused_imports)]\nuse {back} as _;\n")
    print(f"    (planted `use {back} as _;` in {target.relative_to(root).as_posix()})")
    expect("planted cycle", root, True, "import cycle between files")

    # An upward import: the lowest floor's first module imports the highest
    # floor's first module.
    floors = read_floors(REPO / "ARCHITECTURE.md")
    occupied = [modules for _, modules in floors if modules]
    high, low = occupied[0][0], occupied[-1][0]
    root = copy()
    crate = Crate(root / "src")
    low_file = crate.modules[() if low == "crate" else (low,)].file.relative_to(root)
    plant(root, low_file, f"\nfn planted() {{ let _ = crate::{high}::planted; }}\n")
    print(f"    (planted `crate::{high}::planted` in {low_file.as_posix()})")
    expect("planted upward import", root, True, "upward import")

    # The same upward import in a comment, a string and a test module: no edge.
    root = copy()
    plant(
        root,
        low_file,
        f'\n// use crate::{high};\n/// crate::{high}::x\nconst _S: &str = "crate::{high}::x";\n'
        f"#[cfg(test)]\nmod planted_tests {{\n    use crate::{high};\n}}\n",
    )
    expect("upward import in comments, strings and tests", root, False, "")

    # One path per public name: a second path to a public item, planted as a
    # root re-export of a public module's item, fails.
    root = copy()
    crate = Crate(root / "src")
    shown = sorted(p for p in public_paths(crate).values() if len(p) == 1 and len(p[0]) == 2)[0][0]
    plant(root, "src/lib.rs", f"\npub use crate::{shown[0]}::{shown[1]} as PlantedSecondPath;\n")
    print(f"    (planted `pub use crate::{shown[0]}::{shown[1]} as PlantedSecondPath;` in src/lib.rs)")
    expect("planted second public path", root, True, "reachable by 2 paths", lambda root: check_public_paths(root)[0])

    # The layer rule: a service's future renamed, then a layer whose service
    # is named otherwise, fail.
    def replace(root, file, old, new):
        path = root / file
        text = path.read_text()
        if old not in text:
            failures.append(f"{file}: {old!r} not found to plant on")
        path.write_text(text.replace(old, new))

    root = copy()
    replace(root, "src/wallet_jwt/service.rs", "type Future = ResponseFuture<", "type Future = AuthenticateFuture<")
    expect("planted future name", root, True, "future is AuthenticateFuture", lambda root: check_layer_modules(root)[0])
    root = copy()
    replace(root, "src/envelope/style.rs", "Layer<S> for SetEnvelopeStyleLayer", "Layer<S> for EnvelopeStyleLayer")
    expect("planted layer name", root, True, "makes SetEnvelopeStyle", lambda root: check_layer_modules(root)[0])

    # The examples: a copy with them passes; a circle planted in one fails.
    def copy_with_examples():
        tmp = copy()
        shutil.copytree(REPO / "examples", tmp / "examples")
        return tmp

    def expect_examples(name, root, fails, needle):
        expect(name, root, fails, needle, lambda root: check_examples(root)[0])

    expect_examples("untouched examples", copy_with_examples(), False, "")
    root = copy_with_examples()
    planted = None
    for example, crate in example_crates(root):
        edges = collect_file_edges(crate)
        planted = next(
            (
                (s, t)
                for s in sorted(edges)
                for t in sorted(edges[s])
                if crate.file_module[s] and crate.file_module[t]
            ),
            None,
        )
        if planted:
            source, target = planted
            back = "crate::" + display(crate.file_module[source])
            plant(root, target.relative_to(root), f"\n#[allow(unused_imports)]\nuse {back} as _;\n")
            print(f"    (planted `use {back} as _;` in {target.relative_to(root).as_posix()})")
            break
    if planted:
        expect_examples("planted cycle in an example", root, True, "import cycle in example")
    else:
        shutil.rmtree(root)
        failures.append("no example edge to plant a cycle on")

    if failures:
        for failure in failures:
            print(f"layer-check self-test FAILED: {failure}")
        return 1
    print(
        "layer-check self-test: ok (passes untouched, fails on a planted cycle and an upward "
        "import, on a second path to a public item, on a layer out of the module rule, and on a cycle "
        "planted in an example)"
    )
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--self-test", action="store_true", help="check the check on planted violations")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (default: this one)")
    parser.add_argument("--edges", action="store_true", help="print every file edge")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.edges:
        _, _, _, crate, file_edges = check(args.root)
        for s in sorted(file_edges):
            for t in sorted(file_edges[s]):
                line, module = file_edges[s][t][0]
                print(f"{s.relative_to(args.root).as_posix()}:{line} -> {display(module)}")
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())

"""What a name in a candidate refers to: Python's scoping rules over its AST, without running it.

The static rules judge bindings, not spelling: `input(...)` is the builtin only where no parameter,
assignment, import, def, loop or comprehension variable of an enclosing scope shadows it, and
`custom_op` is torch's only where an import put it there. `Bindings` answers, for one `ast.Name`,
which binding statements it may read and whether it may fall through to the builtins:

- a function's (or lambda's, or comprehension's) names are local wherever they are bound in it:
  such a name never reads the builtins (an unbound local raises instead);
- a free name reads the nearest enclosing function that binds it; class bodies are skipped;
- a class body and the module look their names up at run time: a binding hides the builtin only
  if it is a plain statement of that body (not inside an if, loop or with), runs before the use,
  and the name is never deleted there;
- decorators, defaults, annotations, bases and a comprehension's first iterable belong to the
  enclosing scope; a walrus in a comprehension binds in the enclosing function.

Where the answer is not certain (a `global` or `nonlocal` statement anywhere, a star import) the
lookup says `unknown`, and each rule treats that as the worst case.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# Statements that bind a name in a module or class body for certain once they have run.
_CERTAIN = (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TYPE_ALIAS: type | None = getattr(ast, "TypeAlias", None)
# with what `site` adds (a verifier started with -S still knows that a candidate may have exit and quit)
BUILTIN_NAMES = frozenset(dir(builtins)) | {"exit", "quit", "help", "copyright", "credits", "license"}


@dataclass(frozen=True)
class Binding:
    """One statement (or parameter) that binds a name in a scope."""

    kind: str  # import, param, assign, def, class, target (for/with/walrus/match/comprehension), augassign, del, except
    node: ast.AST  # the binding statement, or the ast.arg of a parameter
    value: ast.AST | None = None  # `name = value`: the value (a plain name target only); a parameter: its function
    module: str | None = None  # an import's dotted path: `import torch.nn as nn` -> "torch.nn"
    top: int | None = None  # index in its module or class body where the statement is a plain one of it


@dataclass
class Scope:
    kind: str  # module, class, function, comprehension
    node: ast.AST
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=lambda: defaultdict(list))
    star: bool = False  # a `from m import *` here


@dataclass(frozen=True)
class Lookup:
    """What a name may read: these bindings, the builtin of that name (`builtin`), or anything (`unknown`)."""

    bindings: tuple[Binding, ...]
    builtin: bool
    unknown: bool = False

    @property
    def only_candidate(self) -> bool:
        """Bound, and only by the candidate's own statements: no import, no builtin, nothing unknown."""
        return (not self.unknown and not self.builtin and bool(self.bindings)
                and all(b.kind != "import" for b in self.bindings))


def _target_names(target: ast.AST) -> Iterator[ast.Name]:
    """The plain names an assignment target binds: `a, (b, *c)` -> a, b, c (not b in `b.x` or `b[0]`)."""
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _pattern_names(pattern: ast.AST) -> Iterator[str]:
    """Names a match pattern captures."""
    for node in ast.walk(pattern):
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest


class Bindings:
    """Scopes and bindings of one module; `lookup(name_node)` for any ast.Name in it."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.module = Scope("module", tree, None)
        self.scope_of: dict[int, Scope] = {}  # id(ast.Name) -> the scope it is evaluated in
        # id(node) -> ((id(scope), index of the plain statement of that module/class body holding it), ...)
        self.anchors: dict[int, tuple[tuple[int, int], ...]] = {}
        self.scopes: list[Scope] = [self.module]
        self.scope_of_node: dict[int, Scope] = {id(tree): self.module}  # id(def/class/lambda/comprehension) -> its scope
        # `global` / `nonlocal` anywhere: names may be bound from other scopes; every lookup is unknown
        self.dynamic = any(isinstance(node, (ast.Global, ast.Nonlocal)) for node in ast.walk(tree))
        for index, statement in enumerate(tree.body):
            self._visit(statement, self.module, ((id(self.module), index),))

    # --- building -----------------------------------------------------------------------------

    def _bind(self, scope: Scope, name: str, binding: Binding) -> None:
        scope.bindings[name].append(binding)

    def _top(self, scope: Scope, statement: ast.AST, anchors: tuple[tuple[int, int], ...]) -> int | None:
        """The statement's index in its module or class body if it is a plain statement of it."""
        if scope.kind not in ("module", "class") or not isinstance(statement, _CERTAIN):
            return None
        if isinstance(statement, ast.AnnAssign) and statement.value is None:
            return None
        body = scope.node.body  # type: ignore[attr-defined]
        for scope_id, index in anchors:
            if scope_id == id(scope) and index < len(body) and body[index] is statement:
                return index
        return None

    def _visit_all(self, nodes: Iterable[ast.AST | None], scope: Scope, anchors: tuple[tuple[int, int], ...]) -> None:
        for node in nodes:
            if node is not None:
                self._visit(node, scope, anchors)

    def _bind_targets(self, target: ast.AST, scope: Scope, kind: str, statement: ast.AST,
                      anchors: tuple[tuple[int, int], ...], value: ast.AST | None = None) -> None:
        top = self._top(scope, statement, anchors)
        plain = isinstance(target, ast.Name)
        for name in _target_names(target):
            self._bind(scope, name.id, Binding(kind, statement, value if plain else None, top=top))

    def _visit(self, node: ast.AST, scope: Scope, anchors: tuple[tuple[int, int], ...]) -> None:
        self.anchors[id(node)] = anchors
        if isinstance(node, ast.Name):
            self.scope_of[id(node)] = scope
            return
        if isinstance(node, _FUNCTIONS):
            self._bind(scope, node.name, Binding("def", node, top=self._top(scope, node, anchors)))
            self._function(node, node.args, node.body, scope, anchors,
                           outer=[*node.decorator_list, node.returns, *getattr(node, "type_params", [])])
            return
        if isinstance(node, ast.Lambda):
            self._function(node, node.args, [node.body], scope, anchors, outer=[])
            return
        if isinstance(node, ast.ClassDef):
            self._bind(scope, node.name, Binding("class", node, top=self._top(scope, node, anchors)))
            self._visit_all([*node.decorator_list, *node.bases, *node.keywords, *getattr(node, "type_params", [])],
                            scope, anchors)
            inner = self._new_scope("class", node, scope)
            for index, statement in enumerate(node.body):
                self._visit(statement, inner, (*anchors, (id(inner), index)))
            return
        if isinstance(node, _COMPREHENSIONS):
            self._comprehension(node, scope, anchors)
            return
        if isinstance(node, ast.NamedExpr):
            home = scope
            while home.kind == "comprehension" and home.parent is not None:
                home = home.parent
            if isinstance(node.target, ast.Name):
                self._bind(home, node.target.id, Binding("target", node))
                self.scope_of[id(node.target)] = home
                self.anchors[id(node.target)] = anchors
            self._visit(node.value, scope, anchors)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top = self._top(scope, node, anchors)
            for alias in node.names:
                if alias.name == "*":
                    scope.star = True
                    continue
                if isinstance(node, ast.Import):
                    name = alias.asname or alias.name.split(".", 1)[0]
                    module = alias.name if alias.asname else alias.name.split(".", 1)[0]
                else:
                    name = alias.asname or alias.name
                    module = f"{'.' * node.level}{node.module or ''}.{alias.name}"
                self._bind(scope, name, Binding("import", node, module=module, top=top))
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_targets(target, scope, "assign", node, anchors, node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None or scope.kind in ("function", "comprehension"):
                self._bind_targets(node.target, scope, "assign", node, anchors, node.value)
        elif isinstance(node, ast.AugAssign):
            self._bind_targets(node.target, scope, "augassign", node, anchors)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._bind_targets(node.target, scope, "target", node, anchors)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind_targets(item.optional_vars, scope, "target", node, anchors)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._bind_targets(target, scope, "del", node, anchors)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(scope, node.name, Binding("except", node))  # bound, then deleted at the handler's end
        elif isinstance(node, ast.match_case):
            for name in _pattern_names(node.pattern):
                self._bind(scope, name, Binding("target", node))
        elif _TYPE_ALIAS is not None and isinstance(node, _TYPE_ALIAS):  # 3.12: `type X = ...`
            alias_name = getattr(node, "name", None)
            if isinstance(alias_name, ast.Name):
                self._bind(scope, alias_name.id, Binding("target", node))
        for child in ast.iter_child_nodes(node):
            self._visit(child, scope, anchors)

    def _new_scope(self, kind: str, node: ast.AST, parent: Scope) -> Scope:
        scope = Scope(kind, node, parent)
        self.scopes.append(scope)
        self.scope_of_node[id(node)] = scope
        return scope

    def _function(self, node: ast.AST, args: ast.arguments, body: list, scope: Scope,
                  anchors: tuple[tuple[int, int], ...], outer: list) -> None:
        # evaluated where the def stands: decorators, defaults, annotations, the return annotation
        annotations = [arg.annotation for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                  *filter(None, (args.vararg, args.kwarg)))]
        self._visit_all([*outer, *args.defaults, *args.kw_defaults, *annotations], scope, anchors)
        inner = self._new_scope("function", node, scope)
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))):
            self._bind(inner, arg.arg, Binding("param", arg, value=node))  # value: the function
        self._visit_all(body, inner, anchors)

    def _comprehension(self, node: ast.AST, scope: Scope, anchors: tuple[tuple[int, int], ...]) -> None:
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self._visit(generators[0].iter, scope, anchors)  # the first iterable is evaluated outside
        inner = self._new_scope("comprehension", node, scope)
        for index, generator in enumerate(generators):
            self.anchors[id(generator)] = anchors
            for name in _target_names(generator.target):
                self._bind(inner, name.id, Binding("target", generator))
            self._visit(generator.target, inner, anchors)
            if index:
                self._visit(generator.iter, inner, anchors)
            self._visit_all(generator.ifs, inner, anchors)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        self._visit_all(parts, inner, anchors)

    # --- looking up ---------------------------------------------------------------------------

    def lookup(self, name: ast.Name) -> Lookup:
        """What this name may read where it stands."""
        scope = self.scope_of.get(id(name))
        if scope is None or self.dynamic:
            return Lookup((), True, unknown=True)
        found = self._lookup(name.id, scope, self.anchors.get(id(name), ()))
        if found.builtin and name.id not in BUILTIN_NAMES:
            # no builtin of this name: falling through raises NameError, it reads nothing
            return Lookup(found.bindings, False, found.unknown)
        return found

    def _lookup(self, name: str, scope: Scope, anchors: tuple[tuple[int, int], ...]) -> Lookup:
        if scope.kind in ("function", "comprehension"):
            if name in scope.bindings:
                return Lookup(tuple(scope.bindings[name]), False)
            outer = scope.parent
            while outer is not None and outer.kind != "module":
                if outer.kind != "class" and name in outer.bindings:
                    return Lookup(tuple(outer.bindings[name]), False)
                outer = outer.parent
            return self._in_body(name, self.module, anchors)
        if scope.kind == "class":
            if name in scope.bindings:
                own = self._in_body(name, scope, anchors)
                if not own.builtin:
                    return own
                rest = self._lookup_outside_class(name, scope, anchors)
                return Lookup(own.bindings + rest.bindings, rest.builtin, own.unknown or rest.unknown)
            return self._lookup_outside_class(name, scope, anchors)
        return self._in_body(name, scope, anchors)

    def _lookup_outside_class(self, name: str, scope: Scope, anchors: tuple[tuple[int, int], ...]) -> Lookup:
        outer = scope.parent
        while outer is not None and outer.kind != "module":
            if outer.kind != "class" and name in outer.bindings:
                return Lookup(tuple(outer.bindings[name]), False)
            outer = outer.parent
        return self._in_body(name, self.module, anchors)

    @staticmethod
    def _in_body(name: str, scope: Scope, anchors: tuple[tuple[int, int], ...]) -> Lookup:
        """A module or class body's name, looked up at run time: its bindings, and whether it may
        still be unbound there (and so read the builtin) when the use runs."""
        bindings = tuple(scope.bindings.get(name, ()))
        if scope.star:
            return Lookup(bindings, True, unknown=True)
        index = next((i for scope_id, i in anchors if scope_id == id(scope)), None)
        deleted = any(b.kind in ("del", "except") for b in bindings)
        certain = index is not None and not deleted and any(b.top is not None and b.top < index for b in bindings)
        return Lookup(bindings, not certain)

    # --- what an expression is ----------------------------------------------------------------

    def imported_path(self, node: ast.AST) -> str | None:
        """The dotted path an expression is certain to be, through imports only: `nn.init.f` after
        `import torch.nn as nn` -> "torch.nn.init.f"; None when any binding on the way is not an
        import of that one path (a parameter, an assignment, a second import of something else)."""
        if isinstance(node, ast.Attribute):
            base = self.imported_path(node.value)
            return f"{base}.{node.attr}" if base else None
        if not isinstance(node, ast.Name):
            return None
        found = self.lookup(node)
        if found.unknown or found.builtin or not found.bindings:
            return None
        paths = {b.module if b.kind == "import" else None for b in found.bindings}
        if len(paths) != 1:
            return None
        path = paths.pop()
        return path if path and not path.startswith(".") else None

    def qualified(self, node: ast.AST) -> str | None:
        """imported_path, or "builtins.X" for a name that can only be the builtin X."""
        if isinstance(node, ast.Name):
            found = self.lookup(node)
            if not found.unknown and found.builtin and not found.bindings:
                return f"builtins.{node.id}"
        return self.imported_path(node)


# Bases a candidate class may derive from and keep its methods' `self` an instance: they call a
# subclass's methods only on the instance itself (nn.Module.__call__ -> self.forward).
TRUSTED_BASES = frozenset({"torch.nn.Module", "builtins.object"})
# Method decorators that call the method with the arguments it was given (the first: the instance).
PASS_THROUGH_DECORATORS = frozenset({"torch.no_grad", "torch.inference_mode", "builtins.property"})
# A static method's first parameter is no instance, but it does not hand out the class's methods either.
STATIC_DECORATORS = frozenset({"builtins.staticmethod"})
LOAD_INLINE = "torch.utils.cpp_extension.load_inline"


class Instances:
    """Where `self.name` certainly reads an attribute of the candidate's own instance.

    `self` is trusted in a method (a def directly in a class body, first parameter, never rebound)
    of a class whose methods can only be called bound to an instance: no `type(...)` and no
    `classmethod` anywhere; the class (and every candidate class it shares a base with) has no
    decorator, no metaclass, only candidate classes or nn.Module as bases, methods decorated at most
    with staticmethod, property, torch.no_grad or torch.inference_mode, and its name appears only
    where it is called (`C(...)`), derived from (`class D(C)`) or given to `super(C, self)` (never
    `C.method(obj)`, never passed or stored). A class body that reads its own methods as values
    (`fns = [get]`) hands them out unbound: that class is not trusted either.

    An attribute is the candidate's own when some trusted `self.name = ...` or the class body binds
    it; then reading `self.name` reads what the candidate put there (each such value is checked
    where it is computed), never a module's attribute of that name.
    """

    def __init__(self, tree: ast.Module, bindings: Bindings):
        self.bindings = bindings
        classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        self.names = {node.name for node in classes}
        self._parent = {name: name for name in self.names}
        for node in classes:
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in self.names:
                    self._union(node.name, base.id)
        self.method_class: dict[int, ast.ClassDef] = {}  # id(def) -> the class whose body holds it
        for node in classes:
            for statement in node.body:
                if isinstance(statement, _FUNCTIONS):
                    self.method_class[id(statement)] = node
        self.everything_escapes = False
        escaped: set[str] = set()
        for node in classes:
            if node.decorator_list or node.keywords or getattr(node, "type_params", None):
                escaped.add(node.name)
            for base in node.bases:
                if not (isinstance(base, ast.Name) and base.id in self.names) and bindings.qualified(base) not in TRUSTED_BASES:
                    escaped.add(node.name)
            for statement in node.body:
                if isinstance(statement, _FUNCTIONS) and any(
                        self._decorator(d) not in PASS_THROUGH_DECORATORS | STATIC_DECORATORS
                        for d in statement.decorator_list):
                    escaped.add(node.name)
        allowed: set[int] = set()  # ids of Name nodes where a class name may stand
        for item in ast.walk(tree):
            if isinstance(item, ast.Call) and isinstance(item.func, ast.Name):
                allowed.add(id(item.func))
                if item.func.id == "super" and item.args and isinstance(item.args[0], ast.Name):
                    allowed.add(id(item.args[0]))
            elif isinstance(item, ast.ClassDef):
                allowed.update(id(base) for base in item.bases if isinstance(base, ast.Name))
        for item in ast.walk(tree):
            if not isinstance(item, ast.Name):
                continue
            if item.id in self.names and id(item) not in allowed:
                escaped.add(item.id)
            if item.id in ("type", "classmethod"):
                self.everything_escapes = True
            scope = bindings.scope_of.get(id(item))
            if scope is not None and scope.kind == "class" and isinstance(item.ctx, ast.Load):
                body = scope.node.body  # type: ignore[attr-defined]
                if any(b.kind == "def" and any(b.node is s for s in body) for b in bindings.lookup(item).bindings):
                    escaped.add(scope.node.name)  # type: ignore[attr-defined]
        self.escaped = {self._find(name) for name in escaped}
        # what each family of classes stores on its instances: (family, name) -> values (None: not a plain value)
        self.stored: dict[tuple[str, str], list[ast.AST | None]] = defaultdict(list)
        for node in classes:
            family = self._find(node.name)
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    for target in targets:
                        plain = isinstance(target, ast.Name)
                        for name in _target_names(target):
                            self.stored[(family, name.id)].append(statement.value if plain else None)
                elif isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
                    self.stored[(family, statement.name)].append(None)
        plain_values: dict[int, ast.AST | None] = {}  # id(target) -> value, for `target = value`
        for item in ast.walk(tree):
            if isinstance(item, ast.Assign):
                plain_values.update((id(target), item.value) for target in item.targets)
            elif isinstance(item, ast.AnnAssign):
                plain_values[id(item.target)] = item.value
        for item in ast.walk(tree):
            if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store) and isinstance(item.value, ast.Name):
                owner = self.trusted_self(item.value)
                if owner is not None:
                    self.stored[(self._find(owner.name), item.attr)].append(plain_values.get(id(item)))

    def _find(self, name: str) -> str:
        while self._parent[name] != name:
            self._parent[name] = self._parent[self._parent[name]]
            name = self._parent[name]
        return name

    def _union(self, a: str, b: str) -> None:
        self._parent[self._find(a)] = self._find(b)

    def _decorator(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            node = node.func
        return self.bindings.qualified(node)

    def trusted_self(self, name: ast.Name) -> ast.ClassDef | None:
        """The class whose instance this name certainly is (see the class docstring), or None."""
        if self.everything_escapes:
            return None
        found = self.bindings.lookup(name)
        if found.unknown or found.builtin or len(found.bindings) != 1 or found.bindings[0].kind != "param":
            return None
        function = found.bindings[0].value
        if not isinstance(function, _FUNCTIONS):
            return None
        positional = [*function.args.posonlyargs, *function.args.args]
        owner = self.method_class.get(id(function))
        if owner is None or not positional or positional[0] is not found.bindings[0].node:
            return None
        if any(self._decorator(d) not in PASS_THROUGH_DECORATORS for d in function.decorator_list):
            return None
        return None if self._find(owner.name) in self.escaped else owner

    def owned(self, node: ast.Attribute) -> bool:
        """`self.name` on a trusted instance whose classes store `name` themselves."""
        if not isinstance(node.value, ast.Name):
            return False
        owner = self.trusted_self(node.value)
        return owner is not None and (self._find(owner.name), node.attr) in self.stored

    def is_extension(self, node: ast.AST, seen: frozenset[int] = frozenset()) -> bool:
        """Whether an expression is certainly a module load_inline built (its attributes are the
        candidate's own compiled functions): the call itself, a name only ever bound to one, or a
        trusted `self.x` only ever set to one."""
        if id(node) in seen:
            return False
        seen = seen | {id(node)}
        if isinstance(node, ast.Call):
            return self.bindings.imported_path(node.func) == LOAD_INLINE
        if isinstance(node, ast.Name):
            found = self.bindings.lookup(node)
            return found.only_candidate and all(
                b.kind == "assign" and b.value is not None and self.is_extension(b.value, seen) for b in found.bindings)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = self.trusted_self(node.value)
            values = self.stored.get((self._find(owner.name), node.attr), []) if owner is not None else []
            return bool(values) and all(value is not None and self.is_extension(value, seen) for value in values)
        return False

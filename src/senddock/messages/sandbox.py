"""Jinja's sandbox with limits: no template, whatever its data, may exhaust a process.

Every construct a template can build with is bounded *before* it builds, in size and in time:

- a value (a string one operation makes, or what a list or dict would print as) may not pass
  MAX_VALUE characters: `*`, `+`, `~`, `%`, `.format()`, `|join`, `|sum`, `|replace`,
  `|indent`, `|wordwrap`, str methods (`replace`, `join`, `center`, `expandtabs`, ...) and every
  output (`{{ x }}`) are measured first, a container by a walk that stops past the limit;
- a padding width or a count (`center`, `'%*d'`, `'{:>N}'`, `batch`, `slice`) may not pass
  MAX_WIDTH; a JSON indent MAX_INDENT; `|round`'s precision MAX_PRECISION (its 'ceil' computes
  10 ** precision in C: a billion held the GIL for good); an integer MAX_INT_BITS bits;
- one render (the parts of one message) may not build more than MAX_WORK in all (what every
  checked operation, filter and call made, summed: a character 1, a container's item 4), nor
  output more than MAX_RENDERED;
- every `{% for %}` loop's iterable is wrapped at compile time (a custom code generator) so
  that its iterations look at the clock: nothing, not even an empty loop nested in another,
  outlasts RENDER_SECONDS;
- a recursive macro stops at Python's recursion limit, as a template error.

What stays outside (Python code inside one filter that makes no call the sandbox sees) is
stopped at HARD_SECONDS: by the worker's SIGALRM in a main thread, by `watchdog` in any other
thread (a request of `serve`), which raises RenderStopped in that thread at its next bytecode.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import inspect
import itertools
import re
import string
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import SecurityError
from jinja2.filters import make_attrgetter
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, _PassArg

MAX_VALUE = 1_000_000
MAX_WIDTH = 10_000
MAX_INDENT = 16
MAX_PRECISION = 400  # digits |round may keep: a float has at most 17 that mean anything
MAX_INT_BITS = 64 * 1024
MAX_RENDERED = 4 * 1024 * 1024
MAX_WORK = 4 * MAX_VALUE  # characters, and items of a container at 4 each (below)
RENDER_SECONDS = 1.0
HARD_SECONDS = 2 * RENDER_SECONDS

_LOOP = "senddock_loop"  # the filter every {% for %} iterable passes through
_PRINTF = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d*)(?:\.(?P<precision>\*|\d*))?[hlL]?"
    r"(?P<conversion>[diouxXeEfFgGcrsa%])"
)


class _Render(threading.local):
    """The render in progress in this thread: its deadline (monotonic) and work so far."""

    until: float | None = None
    work = 0


_now = _Render()
_MAIN = threading.main_thread().ident


class limits:
    """One render's clock, work count and (off the main thread) watchdog, around what runs
    inside; a render already in progress in this thread is shared (the parts of one message,
    a check of twenty subscribers: all within one RENDER_SECONDS). A class, not a generator:
    it runs once a message."""

    __slots__ = ("started", "token")

    def __enter__(self) -> None:
        now = time.monotonic()
        until = _now.until
        # A clock long past its hard limit was left by a render stopped from outside just as
        # it ended (the watchdog's exception landed before __exit__ ran): not a render.
        self.started = until is None or now > until + HARD_SECONDS
        if self.started:
            _now.until = now + RENDER_SECONDS
            _now.work = 0
            self.token = None if threading.get_ident() == _MAIN else watchdog.arm()

    def __exit__(self, *_: object) -> None:
        if self.started:
            _now.until = None  # first: nothing below may leave this thread's clock running
            _now.work = 0
            if self.token is not None:
                watchdog.disarm(self.token)


def end_render() -> None:
    """Forget the render in progress (also after one was stopped from outside, by an alarm)."""
    _now.until = None
    _now.work = 0


def check_time() -> None:
    until = _now.until
    if until is not None and time.monotonic() > until:
        raise SecurityError(f"rendering took longer than {RENDER_SECONDS:g} s")


def too_big(what: str) -> SecurityError:
    return SecurityError(f"{what}: a template may not make more than {MAX_VALUE:,} characters")


def _charge(n: int) -> None:
    if n and _now.until is not None:
        _now.work += n
        if _now.work > MAX_WORK:
            raise SecurityError(
                f"a template may not make more than {MAX_WORK:,} characters and items in all"
            )


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | dict) else 0


def _cost(value: Any) -> int:
    """What a value made costs the render's work: a character 1 (1-4 bytes), an item of a
    container 4 (its 8-byte reference, and often a new 28-byte int): MAX_WORK holds a render's
    memory under ~150 MB whatever it keeps."""
    if isinstance(value, str | bytes):
        return len(value)
    return 4 * len(value) if isinstance(value, list | tuple | dict) else 0


def _chars(value: Any) -> int:
    """The characters `str(value)` takes, counted only up to just past MAX_VALUE: a walk of
    a container that stops there (a list of a thousand references to one long string would
    print as gigabytes; the walk sees that after two of them)."""
    if isinstance(value, str | bytes):
        return len(value)
    total = 0
    stack = [value]
    while stack and total <= MAX_VALUE:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item) + 4
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() * 3 // 10 + 2  # decimal digits of it
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            stack.extend(itertools.islice(item.items(), MAX_VALUE))
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + 2 * len(item)
            stack.extend(itertools.islice(item, MAX_VALUE))
        elif isinstance(item, Namespace):
            stack.append(item._Namespace__attrs)
        elif isinstance(item, Undefined):
            continue
        else:
            total += 24  # a number, None, a bool, a macro, a cycler: a short repr
    return total


def _measured(what: str, *values: Any, extra: int = 0) -> int:
    """The characters the values print as (plus `extra`), refused past MAX_VALUE."""
    total = extra
    for v in values:
        total += _chars(v)
        if total > MAX_VALUE:
            break
    if total > MAX_VALUE:
        raise too_big(what)
    return total


def _check_width(n: Any, what: str, limit: int = MAX_WIDTH) -> None:
    if isinstance(n, str):
        n = len(n)
    if isinstance(n, int) and not isinstance(n, bool) and n > limit:
        raise SecurityError(f"{what}: a width of {n} (at most {limit:,})")


def _check_spec(spec: str, what: str) -> None:
    if "{" in spec:
        raise SecurityError(f"{what}: a width of '{{:{spec}}}' (taken from an argument)")
    for digits in re.findall(r"\d+", spec):
        if len(digits) > 6 or int(digits) > MAX_WIDTH:
            raise SecurityError(f"{what}: a width of {digits} (at most {MAX_WIDTH:,})")


def check_printf(fmt: str, args: Any) -> None:
    """`fmt % args` is refused before it runs if a width or precision (given or `*`) passes
    MAX_WIDTH or what it would make passes MAX_VALUE."""
    positional = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, dict) else None
    total = len(fmt)
    for m in _PRINTF.finditer(fmt):
        if m["conversion"] == "%":
            continue
        for n in (m["width"], m["precision"]):
            if n == "*":
                n = positional.pop(0) if positional else 0
            elif n:
                n = int(n) if len(n) <= 6 else MAX_WIDTH + 1
            _check_width(n, "% formatting")
            total += n if isinstance(n, int) else 0
        if m["key"] is not None and mapping is not None:
            total += _chars(mapping.get(m["key"], ""))
        elif positional:
            total += _chars(positional.pop(0))
        if total > MAX_VALUE:
            raise too_big("% formatting")
    _charge(total)


def _check_format(fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """`fmt.format(*args, **kwargs)` is refused before it runs, as check_printf."""
    total = 0
    auto = 0
    for literal, field_name, spec, _ in string.Formatter().parse(fmt):
        total += len(literal)
        if field_name is None:
            continue
        if spec:
            _check_spec(spec, "format()")
            total += sum(int(d) for d in re.findall(r"\d+", spec))
        first = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if first == "":
            value = args[auto] if auto < len(args) else ""
            auto += 1
        elif first.isdigit():
            value = args[int(first)] if int(first) < len(args) else ""
        else:
            value = kwargs.get(first, "")
        total += _chars(value)
        if total > MAX_VALUE:
            raise too_big("format()")
    _charge(total)


# str (and bytes) methods that can make far more than they are given, and how each is judged.
def _str_method(obj: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    text = obj.__self__
    if name in ("center", "ljust", "rjust", "zfill"):
        _check_width(args[0] if args else kwargs.get("width", 0), name)
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        _check_width(size, name)
        tabs = text.count("\t" if isinstance(text, str) else b"\t")
        if isinstance(size, int) and len(text) + tabs * size > MAX_VALUE:
            raise too_big(name)
    elif name == "replace" and len(args) >= 2:
        _check_replace(text, args[0], args[1])
    elif name == "join" and args:
        items = list(itertools.islice(args[0], MAX_VALUE + 1))
        _measured("join", *items, extra=len(text) * len(items))
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((_chars(v) for v in args[0].values()), default=1)
        if len(text) * longest > MAX_VALUE:
            raise too_big(name)


def _check_replace(text: Any, old: Any, new: Any) -> None:
    """`text.replace(old, new)` (a str or bytes method, or the filter) is refused before it
    runs if it would make more than MAX_VALUE."""
    if not isinstance(text, str | bytes):
        text, old, new = str(text), str(old), str(new)
    if type(old) is not type(text) or type(new) is not type(text):
        return  # str.replace of bytes (or the reverse) fails on its own
    times = text.count(old) if old else len(text) + 1
    if len(text) + times * max(0, len(new) - len(old)) > MAX_VALUE:
        raise too_big("replace")


class _Generator(CodeGenerator):
    """Jinja's code generator, with every loop's iterable passed through the `senddock_loop`
    filter and every `~` through `Sandbox.joined` (both measured)."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in node.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, _LOOP, [], [], None, None, lineno=loop.lineno)
        super().visit_Template(node, frame)

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        else:
            join = "markup_join" if frame.eval_ctx.autoescape else "str_join"
        self.write(f"{join}(environment.joined((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")


def _loop(value: Any) -> Iterator[Any]:
    """A loop's iterable, looking at the clock every 256 iterations."""
    for i, item in enumerate(value):
        if not i & 255:
            check_time()
        yield item


class Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the limits above. Touching an unsafe attribute fails at
    once (the stock sandbox renders `{{ x.__class__ }}` empty and fails a step later)."""

    code_generator_class = _Generator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=_finalize, **options)
        self.globals.pop("lipsum", None)  # lipsum(10**6) held a server thread for 140 s
        for name, f in list(self.filters.items()):
            self.filters[name] = _filter(f, name)
        self.filters[_LOOP] = _loop

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def getattr(self, obj: Any, attribute: str) -> Any:
        check_time()
        return super().getattr(obj, attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        check_time()
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str | bytes):
            _str_method(__obj, name, args, kwargs)
        elif isinstance(owner, int) and name == "to_bytes":
            _check_width(args[0] if args else kwargs.get("length", 1), "to_bytes", MAX_VALUE)
        result = super().call(__context, __obj, *args, **kwargs)
        _charge(_cost(result))
        return result

    def wrap_str_format(self, value: Any) -> Any:
        """`str.format` and `format_map` (wrapped by the sandbox when they are looked up):
        refused before they run if they would make too much."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt, is_map = str(value.__self__), value.__name__ == "format_map"

        @functools.wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if is_map:
                _check_format(fmt, (), args[0] if args and isinstance(args[0], dict) else {})
            else:
                _check_format(fmt, args, kwargs)
            return wrapped(*args, **kwargs)

        return checked

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        check_time()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) and isinstance(n, int) and _size(seq) * n > MAX_VALUE:
                    raise too_big("repetition")
            ints = isinstance(left, int) and isinstance(right, int)
            if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise SecurityError("a product too large to compute")
        elif operator == "**":
            ints = isinstance(left, int) and isinstance(right, int) and abs(left) > 1
            if ints and right > 0 and abs(left).bit_length() * right > MAX_INT_BITS:
                raise SecurityError("a power too large to compute")
        elif operator == "%" and isinstance(left, str):
            check_printf(left, right)
        elif operator == "+" and _size(left) + _size(right) > MAX_VALUE:
            raise too_big("concatenation")
        result = super().call_binop(context, operator, left, right)
        _charge(_cost(result))
        return result

    @staticmethod
    def joined(parts: Any) -> Any:
        """The operands of `~`, measured before they are joined."""
        _charge(_measured("concatenation (~)", *parts))
        return parts

    @staticmethod
    def concat(parts: Any) -> str:
        """The rendered part (or a block's, a macro's), refused once past MAX_RENDERED."""
        out = []
        total = 0
        for part in parts:
            total += len(part)
            if total > MAX_RENDERED:
                raise SecurityError(f"the rendered part passes {MAX_RENDERED // 1024**2} MB")
            out.append(part)
        check_time()
        return "".join(out)


def _finalize(value: Any) -> Any:
    """Every `{{ output }}`: a container is measured before it is printed."""
    if value.__class__ is not str and not isinstance(value, str | int | float | Undefined):
        _measured("output", value)
    return value


# Filters that print their value (a container as its repr): the value is measured first.
_PRINTING = frozenset(
    {"capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower"}
    | {"pprint", "replace", "safe", "string", "striptags", "title", "tojson", "trim"}
    | {"truncate", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"}
)


def _pre_filter(name: str, a: dict[str, Any]) -> dict[str, Any]:
    """Refuse a filter's call that would make too much, before it runs; the arguments, maybe
    materialized (a generator measured is a generator spent)."""
    value: Any = a.get("value", a.get("s", a.get("iterable")))
    if name == "xmlattr":
        value = a.get("d")
    if name in _PRINTING:
        _charge(_measured(name, value))
    if name in ("center", "truncate"):
        _check_width(a.get("width", a.get("length")), name)
    elif name == "indent":
        width = a.get("width", 4)
        _check_width(width, name)
        w = len(width) if isinstance(width, str) else int(width or 0)
        text = str(value)
        if len(text) + (text.count("\n") + 1) * w > MAX_VALUE:
            raise too_big(name)
    elif name == "wordwrap":
        width = a.get("width", 79)
        _check_width(width, name)
        text, wrap = str(value), a.get("wrapstring") or "\n"
        lines = len(text) // max(1, int(width)) + text.count("\n") + 1
        if len(text) + lines * len(str(wrap)) > MAX_VALUE:
            raise too_big(name)
    elif name == "replace":
        _check_replace(value, a.get("old", ""), a.get("new", ""))
    elif name == "format":
        check_printf(str(value), a.get("kwargs") or a.get("args", ()))
    elif name in ("batch", "slice"):
        _check_width(a.get("linecount", a.get("slices")), name)
    elif name == "round":  # 'ceil' and 'floor' compute 10 ** precision, in C
        precision = a.get("precision", 0)
        if isinstance(precision, int) and abs(precision) > MAX_PRECISION:
            raise SecurityError(f"round: a precision too large (at most {MAX_PRECISION})")
    elif name == "tojson":
        _check_width(a.get("indent"), name, MAX_INDENT)
    elif name in ("join", "sum"):
        items = list(itertools.islice(value, MAX_VALUE + 1))
        if a.get("attribute") is not None:
            env: Any = a.get("environment", getattr(a.get("eval_ctx"), "environment", None))
            get = make_attrgetter(env, a["attribute"])
            items = [get(item) for item in items]
            a["attribute"] = None
        a["value" if "value" in a else "iterable"] = items
        if name == "join":
            sep = len(str(a.get("d", "")))
            _charge(_measured("join", *items, extra=sep * len(items)))
        else:
            start = a.get("start", 0)
            if sum(_size(x) for x in (*items, start)) > MAX_VALUE:
                raise too_big("sum")
    return a


def _sum(a: dict[str, Any]) -> Any | None:
    """`|sum` of lists or tuples in linear time (Python's sum copies at each step: a thousand
    lists of a thousand took seconds in C), or None: the stock filter's turn."""
    items, start = a["iterable"], a.get("start", 0)
    kind = type(start)
    if kind in (list, tuple) and all(type(x) is kind for x in items):
        return kind(itertools.chain(start, *items))
    return None


_POSITIONAL = inspect.Parameter.POSITIONAL_ONLY
_PASSED = frozenset({"context", "eval_ctx", "environment", "env"})
_PASSED_ARG = inspect.Parameter("passed", _POSITIONAL)


def _filter(f: Callable[..., Any], name: str) -> Callable[..., Any]:
    """A filter that looks at the clock, is refused before it makes too much (`_pre_filter`),
    and charges what it made to the render's work."""
    signature = None
    if name in _PRINTING or name in ("batch", "slice", "join", "sum", "round"):
        try:
            signature = inspect.signature(f)
        except (TypeError, ValueError):  # a C function (markupsafe's escape): one argument
            signature = inspect.Signature([inspect.Parameter("value", _POSITIONAL)])
        params = list(signature.parameters.values())
        if _PassArg.from_obj(f) is not None and params[0].name not in _PASSED:
            # Jinja's async variants take the evaluation context and drop it: bind it too.
            signature = signature.replace(parameters=[_PASSED_ARG, *params])

    @functools.wraps(f)
    def filtered(*args: Any, **kwargs: Any) -> Any:
        check_time()
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                bound = None
            if bound is not None:
                bound.apply_defaults()
                a = _pre_filter(name, {**bound.arguments})
                if name == "sum" and (result := _sum(a)) is not None:
                    _charge(_cost(result))
                    return result
                bound.arguments.update(a)
                args, kwargs = bound.args, bound.kwargs
        result = f(*args, **kwargs)
        _charge(_cost(result))
        return result

    return filtered


class RenderStopped(Exception):
    """A render stopped from outside: by the watchdog after HARD_SECONDS."""


class _Watchdog:
    """Stops a render in a thread other than the main one (a request of `serve`) that outlives
    HARD_SECONDS without reaching a check of its own (Python code inside one filter): raises
    RenderStopped in that thread at its next bytecode. The main thread has the worker's
    SIGALRM. C code that runs long is not interrupted: the checks above keep every such call
    small."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._armed: dict[int, tuple[int, float]] = {}  # thread id -> (token, deadline)
        self._heap: list[tuple[float, int, int]] = []
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self) -> int:
        tid = threading.get_ident()
        with self._lock:
            token = next(self._tokens)
            deadline = time.monotonic() + HARD_SECONDS
            self._armed[tid] = (token, deadline)
            heapq.heappush(self._heap, (deadline, tid, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="render-watchdog", daemon=True
                )
                self._thread.start()
            self._lock.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._lock:
            tid = threading.get_ident()
            if self._armed.get(tid, (None,))[0] == token:
                del self._armed[tid]

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._heap:
                    self._lock.wait()
                deadline, tid, token = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
                if self._armed.get(tid, (None,))[0] == token:
                    del self._armed[tid]
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(tid), ctypes.py_object(RenderStopped)
                    )


watchdog = _Watchdog()

"""A JSON schema as a grammar (GBNF, llama.cpp's grammar text) whose every sentence is a JSON text the schema
accepts, for `response_format` and for the arguments of a tool call.

Only what a grammar can honour exactly is taken: types, properties (required first, then the optional ones in
their order), closed objects, arrays with item schemas and counts, enums and constants, anyOf/oneOf, local
$refs, string lengths, patterns in a regular-expression subset, and whole-number bounds. Anything else that
constrains values (``not``, ``multipleOf``, ``uniqueItems``, fractional bounds…) is refused with the path of
the keyword, rather than letting through answers the schema rejects. Annotations (titles, descriptions,
``format``) are ignored, as validators do by default.
"""

from __future__ import annotations

import json
import re

MAX_DIGITS = 15  # integer digits a number may have: keeps every number rule finite
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly", "format", "$defs", "definitions", "contentMediaType", "contentEncoding"}
BASE_NAMES = {"ws", "char", "string", "number", "integer", "boolean", "null", "value", "object", "array"}
HANDLED = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
           "maxItems", "enum", "const", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern",
           "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}

BASE_RULES = r'''ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})? ws
integer ::= "-"? ("0" | [1-9] [0-9]{0,14}) ws
boolean ::= ("true" | "false") ws
null ::= "null" ws
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws
array ::= "[" ws (value ("," ws value)*)? "]" ws'''


class UnsupportedSchema(ValueError):
    """A schema keyword a grammar cannot honour here; ``path`` is where it is, e.g. "properties.age.multipleOf"."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path, self.message = path, message


def schema_grammar(schema: dict) -> str:
    """The grammar text, with its start rule ``root``."""
    compiler = _Compiler(schema)
    start = compiler.rule(schema, "root", "")
    return "\n".join([f"root ::= {start}" if start != "root" else "", *compiler.lines, BASE_RULES]).strip()


def schema_rules(schema: dict, prefix: str) -> tuple[str, list[str]]:
    """The schema as rules named ``prefix-…`` to go inside a larger grammar: (its start rule's name, the rule
    lines); the larger grammar appends ``BASE_RULES`` once."""
    compiler = _Compiler(schema, prefix)
    start = compiler.rule(schema, prefix, "")
    return start, compiler.lines


class _Compiler:
    def __init__(self, document: dict, prefix: str = ""):
        self.document = document
        self.prefix = prefix
        self.lines: list[str] = []
        self.names: set[str] = set()
        self.refs: dict[str, str] = {}

    def rule(self, schema, hint: str, path: str) -> str:
        """The name of a rule for ``schema`` (a new one, or a base rule that already says it)."""
        if schema is True or schema == {}:
            return "value"
        if not isinstance(schema, dict):
            raise UnsupportedSchema(path, "a schema must be an object")
        for key in schema:
            if key not in HANDLED and key not in ANNOTATIONS:
                raise UnsupportedSchema(_join(path, key), f"'{key}' cannot be enforced while generating")
        body = self.body(schema, hint, path)
        return body if body in BASE_NAMES or body in self.refs.values() else self.add(hint, body)

    def add(self, hint: str, body: str) -> str:
        name = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-") or "r"
        base, count = name, 1
        while name in self.names or name in BASE_NAMES:
            count += 1
            name = f"{base}-{count}"
        self.names.add(name)
        self.lines.append(f"{name} ::= {body}")
        return name

    def body(self, schema: dict, hint: str, path: str) -> str:
        if "$ref" in schema:
            return self.ref(schema["$ref"], _join(path, "$ref"))
        if "const" in schema:
            return _literal(json.dumps(schema["const"], ensure_ascii=False)) + " ws"
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchema(_join(path, "enum"), "'enum' must be a non-empty list")
            return "(" + " | ".join(_literal(json.dumps(v, ensure_ascii=False)) for v in values) + ") ws"
        for union in ("anyOf", "oneOf"):
            if union in schema:
                alternatives = [self.rule({**_without(schema, union), **branch} if isinstance(branch, dict) else branch,
                                          f"{hint}-{index}", _join(path, f"{union}[{index}]"))
                                for index, branch in enumerate(schema[union])]
                return " | ".join(alternatives)
        kind = schema.get("type")
        if isinstance(kind, list):
            return " | ".join(self.rule({**schema, "type": one}, f"{hint}-{one}", path) for one in kind)
        if kind is None:
            kind = _implied_type(schema)
        if kind == "object":
            return self.object(schema, hint, path)
        if kind == "array":
            return self.array(schema, hint, path)
        if kind == "string":
            return self.string(schema, hint, path)
        if kind in ("number", "integer"):
            return _number(schema, kind, path)
        if kind in ("boolean", "null"):
            return kind
        if kind is None:
            return "value"
        raise UnsupportedSchema(_join(path, "type"), f"unknown type {kind!r}")

    def ref(self, ref, path: str) -> str:
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref) if isinstance(ref, str) else None
        if match is None:
            raise UnsupportedSchema(path, f"only local references like '#/$defs/name' are followed, not {ref!r}")
        if ref not in self.refs:
            target = self.document.get(match.group(1), {}).get(match.group(2))
            if target is None:
                raise UnsupportedSchema(path, f"{ref!r} names no definition")
            name = re.sub(r"[^a-zA-Z0-9-]+", "-", f"{self.prefix}-ref-{match.group(2)}".lstrip("-"))
            self.refs[ref] = name
            self.names.add(name)
            at = len(self.lines)
            body = self.body(target, name, f"{match.group(1)}.{match.group(2)}")
            self.lines.insert(at, f"{name} ::= {body}")
        return self.refs[ref]

    def object(self, schema: dict, hint: str, path: str) -> str:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise UnsupportedSchema(_join(path, "properties"), "'properties' must be an object")
        extra = schema.get("additionalProperties", True)
        if not properties and extra is not False:
            if isinstance(extra, dict) and extra:
                raise UnsupportedSchema(_join(path, "additionalProperties"), "a schema for additional properties "
                                        "is not supported: list the properties")
            return "object"
        required = schema.get("required", [])
        missing = [name for name in required if name not in properties]
        if missing:
            raise UnsupportedSchema(_join(path, "required"), f"required {missing[0]!r} is not among 'properties'")
        pairs = {name: _literal(json.dumps(name, ensure_ascii=False)) + " ws \":\" ws "
                 + self.rule(sub, f"{hint}-{name}", _join(path, f"properties.{name}"))
                 for name, sub in properties.items()}
        fixed = [pairs[name] for name in properties if name in required]
        optional = [pairs[name] for name in properties if name not in required]
        if fixed:  # the required ones in order, then each optional one or not, each after a comma
            inner = ' "," ws '.join(fixed) + "".join(f' ("," ws {pair})?' for pair in optional)
            return '"{" ws ' + inner + ' "}" ws'
        # no required property: any subset of the optional ones, in order, with commas between
        starts = [pair + "".join(f' ("," ws {later})?' for later in optional[index + 1:])
                  for index, pair in enumerate(optional)]
        return '"{" ws (' + " | ".join(starts) + ')? "}" ws'

    def array(self, schema: dict, hint: str, path: str) -> str:
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if "prefixItems" in schema:
            items = [self.rule(item, f"{hint}-{index}", _join(path, f"prefixItems[{index}]"))
                     for index, item in enumerate(schema["prefixItems"])]
            if schema.get("items", False) is not False or low not in (0, len(items)) or high not in (None, len(items)):
                raise UnsupportedSchema(_join(path, "prefixItems"), "only a fixed tuple (items: false) is supported")
            return '"[" ws ' + ' "," ws '.join(items) + ' "]" ws'
        item = self.rule(schema.get("items", True), f"{hint}-item", _join(path, "items"))
        return '"[" ws ' + _repeat(item, low, high, '"," ws') + ' "]" ws'

    def string(self, schema: dict, hint: str, path: str) -> str:
        if "pattern" in schema:
            if "minLength" in schema or "maxLength" in schema:
                raise UnsupportedSchema(_join(path, "pattern"), "a pattern together with a length is not supported")
            return '"\\"" ' + self.add(f"{hint}-pattern", _pattern(schema["pattern"], _join(path, "pattern"))) + ' "\\"" ws'
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if low == 0 and high is None:
            return "string"
        return '"\\"" ' + _repeat("char", low, high) + ' "\\"" ws'


# --- pieces -----------------------------------------------------------------------------------------
def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _without(schema: dict, key: str) -> dict:
    return {k: v for k, v in schema.items() if k != key}


def _implied_type(schema: dict) -> str | None:
    if "properties" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if {"pattern", "minLength", "maxLength"} & schema.keys():
        return "string"
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & schema.keys():
        return "number"
    return None


def _literal(text: str) -> str:
    """``text`` as a grammar string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'


def _repeat(item: str, low: int, high: int | None, separator: str = "") -> str:
    """``item`` low..high times (high None: no limit), ``separator`` between."""
    if not isinstance(low, int) or low < 0 or (high is not None and (not isinstance(high, int) or high < low)):
        raise UnsupportedSchema("", f"bad repetition {low}..{high}")
    if not separator:
        return f"{item}{{{low},{'' if high is None else high}}}"
    if high == 0:
        return ""
    rest = f"({separator} {item}){{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
    whole = f"{item} {rest}"
    return whole if low > 0 else f"({whole})?"


# --- numbers ----------------------------------------------------------------------------------------
def _number(schema: dict, kind: str, path: str) -> str:
    low, high = _bounds(schema, kind, path)
    if low is None and high is None:
        return kind
    whole = _integer_range(low, high)
    if kind == "integer":
        return f"({whole}) ws"
    # a fraction only where every value it can make stays in bounds: after whole numbers i with [i, i+1] inside
    fractions = []
    positive = _integer_range(max(low, 0) if low is not None else 0, None if high is None else high - 1)
    if positive and (high is None or high >= 1):
        fractions.append(f'({positive}) "." [0-9]{{1,{MAX_DIGITS}}}')
    if low is None or low <= -1:  # -(i + f) with i + f <= -low and i + f >= -high
        magnitude = _integer_range(0 if high is None or high >= 0 else -high, None if low is None else -low - 1)
        if magnitude:
            fractions.append(f'"-" ({magnitude}) "." [0-9]{{1,{MAX_DIGITS}}}')
    return "(" + " | ".join([f"({whole})", *fractions]) + ") ws"


def _bounds(schema: dict, kind: str, path: str) -> tuple[int | None, int | None]:
    """Inclusive whole-number bounds; a fractional bound on a number is refused (a grammar cannot compare
    decimals cheaply)."""
    low = high = None
    for key, is_low, exclusive in (("minimum", True, False), ("exclusiveMinimum", True, True),
                                   ("maximum", False, False), ("exclusiveMaximum", False, True)):
        if key not in schema:
            continue
        value = schema[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnsupportedSchema(_join(path, key), f"'{key}' must be a number")
        if value != int(value):
            if kind == "number":
                raise UnsupportedSchema(_join(path, key), "only whole-number bounds can be enforced")
            value = int(value // 1) + 1 if is_low else int(value // 1)  # an integer above / below a fraction
            exclusive = False
        value = int(value)
        if exclusive and kind == "integer":
            value, exclusive = value + (1 if is_low else -1), False
        if exclusive:
            raise UnsupportedSchema(_join(path, key), "exclusive bounds on a number cannot be enforced: use "
                                    "'minimum'/'maximum', or an integer")
        if is_low:
            low = value if low is None else max(low, value)
        else:
            high = value if high is None else min(high, value)
    if low is not None and high is not None and low > high:
        raise UnsupportedSchema(path, f"no number lies between {low} and {high}")
    return low, high


def _integer_range(low: int | None, high: int | None) -> str:
    """Alternatives spelling every integer from ``low`` to ``high`` (None: unbounded), or "" if none."""
    parts = []
    if high is None or high >= 0:  # the non-negative part
        parts += _natural(max(low, 0) if low is not None else 0, high)
    if low is None or low < 0:  # the negative part, by magnitude
        magnitudes = _natural(max(-high, 1) if high is not None and high < 0 else 1, None if low is None else -low)
        parts += [f'"-" {part}' for part in magnitudes]
    return " | ".join(f"({part})" if " " in part else part for part in parts)


def _natural(low: int, high: int | None) -> list[str]:
    """Alternatives for the naturals low..high without leading zeros (high None: up to MAX_DIGITS digits)."""
    if high is not None and low > high:
        return []
    top = high if high is not None else 10 ** MAX_DIGITS - 1
    parts = []
    for digits in range(len(str(low)), len(str(top)) + 1):
        first = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        last = min(top, 10 ** digits - 1)
        if first <= last:
            parts += _same_length(str(first), str(last))
    return parts


def _same_length(a: str, b: str) -> list[str]:
    """Alternatives for the numbers a..b, both of the same length."""
    if a == b:
        return [f'"{a}"']
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    rest = len(a) - 1
    if a[1:] == "0" * rest and b[1:] == "9" * rest:
        return [f"[{a[0]}-{b[0]}] [0-9]{{{rest}}}"]
    if a[0] == b[0]:
        return [f'"{a[0]}" ({" | ".join(_same_length(a[1:], b[1:]))})']
    parts = [f'"{a[0]}" ({" | ".join(_same_length(a[1:], "9" * rest))})']
    if int(b[0]) - int(a[0]) > 1:
        parts.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}] [0-9]{{{rest}}}")
    parts.append(f'"{b[0]}" ({" | ".join(_same_length("0" * rest, b[1:]))})')
    return parts


# --- patterns ---------------------------------------------------------------------------------------
# characters a pattern may produce inside a JSON string unescaped: no quote, backslash or control character
_PLAIN = '^"\\\\\\x00-\\x1F'
_CLASSES = {"d": "[0-9]", "w": "[a-zA-Z0-9_]", "s": "[ ]", "D": f"[{_PLAIN}0-9]", "W": f"[{_PLAIN}a-zA-Z0-9_]",
            "S": f"[{_PLAIN} ]"}


def _pattern(pattern, path: str) -> str:
    """A regular expression (the common subset: literals, classes, ., groups, |, quantifiers, ^ and $) as the
    grammar of the string's characters. An end without an anchor takes any characters, as JSON Schema's
    patterns match anywhere in the string."""
    if not isinstance(pattern, str):
        raise UnsupportedSchema(path, "'pattern' must be a string")
    parser = _Pattern(pattern, path)
    anchored_start = pattern.startswith("^")
    if anchored_start:
        parser.at = 1
    body = parser.alternatives()
    anchored_end = parser.at < len(pattern) and pattern[parser.at] == "$" and parser.at == len(pattern) - 1
    if anchored_end:
        parser.at += 1
    if parser.at != len(pattern):
        raise UnsupportedSchema(path, f"cannot read the pattern at {pattern[parser.at:]!r}")
    anything = "char*"
    return " ".join(part for part in (None if anchored_start else anything, f"({body})",
                                      None if anchored_end else anything) if part)


class _Pattern:
    def __init__(self, text: str, path: str):
        self.text, self.path, self.at = text, path, 0

    def fail(self, why: str):
        raise UnsupportedSchema(self.path, f"{why} (at {self.text[self.at:]!r}): use a simpler pattern")

    def alternatives(self) -> str:
        options = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            options.append(self.sequence())
        return " | ".join(option or '""' for option in options)

    def sequence(self) -> str:
        items = []
        while self.peek() not in (None, "|", ")") and not (self.peek() == "$" and self.at == len(self.text) - 1):
            atom = self.atom()
            items.append(atom + self.quantifier())
        return " ".join(items)

    def peek(self):
        return self.text[self.at] if self.at < len(self.text) else None

    def atom(self) -> str:
        char = self.text[self.at]
        self.at += 1
        if char == "(":
            if self.text.startswith("?:", self.at):
                self.at += 2
            elif self.peek() == "?":
                self.fail("lookarounds and named groups are not supported")
            inner = self.alternatives()
            if self.peek() != ")":
                self.fail("an unclosed group")
            self.at += 1
            return f"({inner})"
        if char == "[":
            return self.char_class()
        if char == ".":
            return f"[{_PLAIN}]"
        if char == "\\":
            return self.escape(in_class=False)
        if char in "*+?{":
            self.fail("a quantifier with nothing to repeat")
        if char in "^$":
            self.fail("anchors inside the pattern are not supported")
        return self.plain(char)

    def plain(self, char: str) -> str:
        if char in '"\\' or ord(char) < 0x20:
            self.fail("quotes, backslashes and control characters are not supported in patterns")
        return _literal(char)

    def escape(self, in_class: bool) -> str:
        char = self.peek()
        if char is None:
            self.fail("a trailing backslash")
        self.at += 1
        if char in _CLASSES and not (in_class and char.isupper()):
            return _CLASSES[char][1:-1] if in_class else _CLASSES[char]
        if in_class:
            if char not in "[]":
                self.fail(f"the escape \\{char} inside a class is not supported")
            return "\\" + char
        if char in "\\\"" or char.isalnum():
            self.fail(f"the escape \\{char} is not supported")
        return self.plain(char)

    def char_class(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.at += 1
        members = ""
        first = True
        while self.peek() is not None and (self.peek() != "]" or first):
            char = self.text[self.at]
            first = False
            self.at += 1
            if char == "\\":
                members += self.escape(in_class=True)
            elif char in '"' or ord(char) < 0x20:
                self.fail("quotes and control characters are not supported in a class")
            elif char in "[":
                members += "\\["
            else:
                members += char
        if self.peek() != "]":
            self.fail("an unclosed character class")
        self.at += 1
        return f"[^{members}\"\\\\\\x00-\\x1F]" if negated else f"[{members}]"

    def quantifier(self) -> str:
        char = self.peek()
        if char in ("*", "+", "?"):
            self.at += 1
            if self.peek() in ("?", "+"):
                self.at += 1  # lazy or possessive: the same strings
            return char
        if char == "{":
            match = re.match(r"\{(\d+)(,(\d*))?\}", self.text[self.at:])
            if not match:
                self.fail("a malformed repetition")
            self.at += match.end()
            low, comma, high = match.group(1), match.group(2), match.group(3)
            return f"{{{low}}}" if comma is None else f"{{{low},{high or ''}}}"
        return ""

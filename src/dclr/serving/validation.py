"""FastAPI's validation errors in words people can act on (the 422 answer's message and field)."""

from __future__ import annotations

from collections.abc import Sequence

# Validation problems listed in one error message: the first few are enough to fix a request.
MAX_PROBLEMS = 5


def describe_validation(problems: Sequence[dict]) -> tuple[str, str | None, str | None]:
    """FastAPI's validation errors -> (message, offending field, code) people can act on."""
    if not problems:
        return "malformed request", None, None
    first = problems[0]
    if first.get("type") == "json_invalid":
        position = first.get("loc", (None, "?"))[-1]
        return f"request body is not valid JSON (at character {position})", "body", "json_invalid"
    parts: list[str] = []
    for problem in problems:
        # Union members appear in `loc` as type tags ('str', 'list[str]'): keep only field names
        # and list positions.
        path = [str(p) for p in problem.get("loc", ())[1:] if not _is_type_tag(p)]
        text = f"{'.'.join(path) or 'body'}: {problem.get('msg')}"
        if text not in parts:
            parts.append(text)
    field = next((str(p) for p in first.get("loc", ())[1:2]), None)
    if field == "input" and first.get("type") in ("string_type", "list_type"):
        parts = ["input must be a string or a list of strings (token-id input is not supported)"]
    return "; ".join(parts[:MAX_PROBLEMS]), field, first.get("type")


def _is_type_tag(part: object) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)


# Headers in which a client says how long it will wait, in seconds: OpenAI's Python client sends
# x-stainless-timeout; X-Request-Timeout is for everyone else. A request the queue could not
# finish within TIMEOUT_SHARE of it is refused at once (503, Retry-After) instead of timing out.

"""Compression building blocks: pure functions over text and core types, no ADK.

The pipeline's compress stage picks among them: `compress_tool_output` shrinks one tool result
by its kind, `middle_out` is the generic fallback, `fold_tool_pair` / `fold_message` turn old turns
into one line each, references keep exact names alive across folding, known values (`extract_values`)
keep the ids and values a folded turn carried, `failure_lines` says which output lines are failures
(`error_lines` is the one definition of error lines and noise), and a `Summarizer` merges
fold lines into a running summary. Every function takes a token counter (a `TokenCounter` or any
`str -> int` callable) and returns output measured to fit its cap, the same bytes for the same input.
"""

from ._fit import TextCounting, TokenCounterLike, clip_text
from .compact_json import compact_json, expand_compact_json
from .error_lines import failure_lines
from .fold import describe_outcome, fold_message, fold_tool_pair
from .middle_out import middle_out, omission_marker
from .references import (
    KIND_WEIGHTS,
    Reference,
    ReferenceKind,
    extract_call_references,
    extract_references,
    merge_references,
    render_references,
    score_references,
)
from .summarize import (
    HANDOFF_PROMPT,
    ExtractiveSummarizer,
    SummarizeFn,
    Summarizer,
    build_handoff_request,
    run_summarizer,
    validate_summary,
)
from .tool_results import CompressedOutput, ToolOutputKind, classify_tool_output, compress_tool_output, render_payload
from .value_merge import merge_values
from .values import ValueSet, argument_order, extract_values, render_call, render_values, values_from_messages

__all__ = [
    "TextCounting", "TokenCounterLike", "clip_text",
    "middle_out", "omission_marker",
    "ToolOutputKind", "CompressedOutput", "classify_tool_output", "compress_tool_output", "render_payload",
    "fold_tool_pair", "fold_message", "describe_outcome",
    "ReferenceKind", "Reference", "KIND_WEIGHTS", "extract_references", "extract_call_references",
    "score_references", "merge_references", "render_references",
    "Summarizer", "SummarizeFn", "ExtractiveSummarizer", "HANDOFF_PROMPT", "build_handoff_request",
    "validate_summary", "run_summarizer",
    "failure_lines", "compact_json", "expand_compact_json",
    "ValueSet", "extract_values", "values_from_messages", "merge_values", "render_values", "render_call",
    "argument_order",
]

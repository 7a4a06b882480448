"""The shipped Hermes template renders tools, tool calls and tool results, and the
bundled checkpoint carries it."""

from __future__ import annotations

import json

from seal_graph.bundled_model import hermes_chat_template

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]

CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "2+3 and 1+1?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "add", "arguments": {"a": 1, "b": 1}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "5"},
    {"role": "tool", "tool_call_id": "c2", "content": "2"},
    {"role": "assistant", "content": "5 and 2."},
]


def test_bundled_checkpoint_carries_the_template(tokenizer) -> None:
    assert tokenizer.chat_template == hermes_chat_template()


def test_renders_tools_calls_and_results(tokenizer) -> None:
    text = tokenizer.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nYou add numbers.\n\nYou can call functions.")
    assert "<tools>\n" + json.dumps(TOOLS[0]["function"]) + "\n</tools>" in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}'
        '\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 1}}'
        "\n</tool_call><|im_end|>\n"
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n2\n"
        "</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n5 and 2.<|im_end|>\n<|im_start|>assistant\n")


def test_without_tools_it_is_plain_chatml(tokenizer) -> None:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )

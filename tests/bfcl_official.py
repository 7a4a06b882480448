"""`bfcl evaluate` as BFCL ships it, runnable without its provider SDKs.

bfcl-eval's CLI imports the SDK of every model provider it can call (tree-sitter
parsers, Cohere, Mistral, Gemini, Bedrock, ...) before it does anything; scoring
multi-turn results for an OpenAI function-calling model name uses none of them. This
script stands an empty module in for each one that is not installed, then runs bfcl's
own CLI unchanged: `python tests/bfcl_official.py evaluate --model ... ` is `bfcl
evaluate --model ...`. Only the agreement test uses it (`--no-deps` installs of
bfcl-eval have no CLI otherwise).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from unittest import mock

PROVIDER_SDKS = (
    "tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "anthropic", "cohere",
    "google.genai", "mistralai", "boto3", "qwen_agent", "writerai",
    "datamodel_code_generator", "tabulate",
)  # fmt: skip


class _AbsentSDKs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on the import path: an SDK no other finder found becomes an empty module."""

    def find_spec(self, name: str, path: object, target: object = None) -> object:
        if any(name == sdk or name.startswith(sdk + ".") for sdk in PROVIDER_SDKS):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__ = [], spec
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: every attribute is a stand-in."""


if __name__ == "__main__":
    sys.meta_path.append(_AbsentSDKs())
    from bfcl_eval.__main__ import cli

    sys.argv[0] = "bfcl"
    cli()

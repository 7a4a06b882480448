"""Serving benchmark: server start time and decode throughput of the bundled model.

    .venv/bin/python benchmarks/serving.py [--dtype float32] [--tokens 128] [--streams 1 8]

Prints one JSON line per setting; `docs/results/serving.md` records what it printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import openai

from seal_graph import ModelServer, ServerSettings


async def throughput(server: ModelServer, streams: int, tokens: int, rounds: int) -> float:
    client = openai.AsyncOpenAI(base_url=server.endpoint.base_url, api_key=server.endpoint.api_key)

    async def one(i: int) -> int:
        reply = await client.chat.completions.create(
            model=server.endpoint.model,
            max_tokens=tokens,
            temperature=1.0,
            messages=[{"role": "user", "content": f"Tell a long story about a robot #{i}."}],
            extra_body={"ignore_eos": True},
        )
        return reply.usage.completion_tokens

    await one(-1)  # warm-up
    began = time.perf_counter()
    produced = 0
    for r in range(rounds):
        produced += sum(await asyncio.gather(*(one(r * streams + i) for i in range(streams))))
    return produced / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--no-lora", action="store_true", help="Start without --enable-lora.")
    args = parser.parse_args()
    began = time.perf_counter()
    with ModelServer.start(
        ServerSettings(dtype=args.dtype, enable_lora=not args.no_lora)
    ) as server:
        ready = time.perf_counter() - began
        for streams in args.streams:
            rate = asyncio.run(throughput(server, streams, args.tokens, args.rounds))
            print(
                json.dumps(
                    {
                        "dtype": args.dtype,
                        "lora_enabled": not args.no_lora,
                        "ready_s": round(ready, 1),
                        "streams": streams,
                        "tokens_per_request": args.tokens,
                        "tokens_per_s": round(rate, 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()

"""One non-disaggregated vLLM engine with a phase's engine kwargs (no KV connector), alone on the GPU: its greedy
answers to the parity prompts and its memory report, as JSON. Run by the runner in a process of its own with
VLLM_LOGGING_LEVEL=DEBUG (vLLM logs its profile at that level), so its log holds the whole memory report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_check.reference")
    parser.add_argument("--model", required=True)
    parser.add_argument("--engine-kwargs", required=True, help="JSON")
    parser.add_argument("--prompts", type=Path, help="JSON list of token-id lists; none: start, report, stop")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--logprobs", type=int, default=5, help="top-k logprobs of each generated position")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    from vllm import LLM
    from vllm.inputs import TokensPrompt

    started = time.monotonic()
    llm = LLM(model=args.model, **json.loads(args.engine_kwargs))
    result: dict[str, object] = {"start_s": round(time.monotonic() - started, 1), "outputs": []}
    if args.prompts:
        # The engine's defaults from the model's generation config, as the OpenAI server applies them, then greedy,
        # with the top-k logprobs of every generated position (what parity compares beside the tokens).
        params = llm.get_default_sampling_params()
        params.temperature = 0.0
        params.max_tokens = args.max_tokens
        params.ignore_eos = True
        params.logprobs = args.logprobs
        prompts = json.loads(args.prompts.read_text())

        def answers(batch: list[list[int]]) -> list[dict[str, object]]:
            outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in batch], params, use_tqdm=False)
            return [_answer(output.outputs[0]) for output in outputs]

        # One prompt at a time, as the check sends them to PD; then the controls: the same prompts in one batch
        # (another batch composition: the noise floor), and each prompt with its first token changed (context).
        generating = time.monotonic()
        alone = [answers([ids])[0] for ids in prompts]
        result["answers"] = alone
        result["outputs"] = [a["tokens"] for a in alone]
        result["generate_s"] = round(time.monotonic() - generating, 1)
        result["batched"] = answers(prompts)
        result["variants"] = [answers([_first_token_changed(ids)])[0] for ids in prompts]
    args.output.write_text(json.dumps(result))
    print(f"reference: answers written to {args.output}", flush=True)
    return 0


def _answer(completion: object) -> dict[str, object]:
    """Token ids and, per position, the top-k logprobs keyed by token id (as strings: JSON keys)."""
    tokens = list(completion.token_ids)  # type: ignore[attr-defined]
    top = [
        {str(token): float(logprob.logprob) for token, logprob in position.items()}
        for position in (completion.logprobs or [])  # type: ignore[attr-defined]
    ]
    return {"tokens": tokens, "top_logprobs": top}


def _first_token_changed(ids: list[int]) -> list[int]:
    """The context control's prompt: the same tokens but the first (a neighbour id, never the same)."""
    return [ids[0] + 1 if ids[0] % 2 == 0 else ids[0] - 1, *ids[1:]]


if __name__ == "__main__":
    sys.exit(main())

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
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    from vllm import LLM
    from vllm.inputs import TokensPrompt

    started = time.monotonic()
    llm = LLM(model=args.model, **json.loads(args.engine_kwargs))
    result: dict[str, object] = {"start_s": round(time.monotonic() - started, 1), "outputs": []}
    if args.prompts:
        # The engine's defaults from the model's generation config, as the OpenAI server applies them, then greedy.
        params = llm.get_default_sampling_params()
        params.temperature = 0.0
        params.max_tokens = args.max_tokens
        params.ignore_eos = True
        # One prompt at a time, as the check sends them to PD: batches of other shapes may round differently.
        generating = time.monotonic()
        outputs = [
            llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0]
            for ids in json.loads(args.prompts.read_text())
        ]
        result["outputs"] = [list(output.outputs[0].token_ids) for output in outputs]
        result["generate_s"] = round(time.monotonic() - generating, 1)
    args.output.write_text(json.dumps(result))
    print(f"reference: answers written to {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make local-check`: the synthesized serving config, run for real on one GPU host before a 30-minute deploy.

Two halves, so the GPU side needs only the image's stack (Ray, vLLM, NIXL, PyYAML), not the CDK:
- plan (tools/local_check/plan.py, the project's side): the RayService as the synth builds it, the fit check's
  prediction per phase, the benchmark Job's own commands and the image's versions, written to one JSON file;
- run (tools/local_check/runner.py, the GPU host's side): a local Ray cluster shaped from that RayService, the
  serve config deployed with only what one host forces changed (tools/local_check/shape.py names each change),
  then the endpoint's routes, greedy parity against one non-disaggregated engine, the NIXL lines, the benchmark
  (tools/local_check/application.py) and the memory report against the prediction; one JSON and one PNG, exit 0
  only when everything held.
"""

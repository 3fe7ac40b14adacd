"""The maintainers' commands: what keeps the repository's generated and vendored files and its reviews in step
(docs tables, dist/, CRD imports, vendored upstream facts, accepted findings, the review of a change, the synth
benchmark). The operator's commands (preflight, verify, bench, endpoint, teardown, mirror, the local check) are in
tools/ itself."""

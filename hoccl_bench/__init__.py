"""HOCCL's benchmark harness (not the library): ``hoccl-bench`` (:mod:`hoccl_bench.bench`), its report
(``hoccl-bench-report``, :mod:`hoccl_bench.report`), the SM probe (:mod:`hoccl_bench.smfree`) and the helpers that
run "nodes" as processes (:mod:`hoccl_bench.nodeprocs`). It uses the runtime's public API and a few of its internals
(flags, pacing) to build baselines; the runtime does not import it."""

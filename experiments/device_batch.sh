#!/usr/bin/env bash
# Reruns on the lent 16-CPU host (JAX on CPU), everything at once, each bounded by LIMIT seconds:
#   bash experiments/device_batch.sh "table fig9 fig13 validation optim"   (names to run)
#   BENCH_CMD='python benchmarks/bench_hw_sweep.py; ...' bash experiments/device_batch.sh bench
# The e2e collective table resumes from results/table_partial.json (carry it to the device and
# back between calls).  Everything the runs write comes back as one archive, $OUT/batch.tgz
# (the device returns at most 8 files).
set -u
export PYTHONPATH=$PWD JAX_PLATFORMS=cpu
LIMIT=${LIMIT:-550}
TABLE_JOBS=${TABLE_JOBS:-10}
mkdir -p results "$OUT/log"
run() { local name=$1; shift; ( timeout "$LIMIT" "$@" > "$OUT/log/$name.txt" 2>&1; echo "rc=$?" >> "$OUT/log/$name.txt" ) & }
for job in $1; do
  case $job in
    table)   # two halves at once: 2-16 GPUs on CPU processes, 32 and 64 GPUs with the path model on the GPU
      run table_small python -m nuna_jax.e2e.llm.collective_table --jobs "$TABLE_JOBS" --groups 2,4,8,16 \
          --partial results/p_small.json --out results/t_small.json --keep-partial
      run table_large env JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false \
          python -m nuna_jax.e2e.llm.collective_table --jobs "${TABLE_GPU_JOBS:-5}" --groups 32,64 \
          --partial results/p_large.json --out results/t_large.json --keep-partial ;;
    fig9) run fig9 python experiments/fig9_speedup.py --jobs "${FIG9_JOBS:-4}" ;;
    fig13) run fig13 python experiments/fig13_nar_granularity.py ;;
    validation) run validation python experiments/validate_analytical.py ;;
    optim) run optim sh -c "${OPTIM_CMD:?set OPTIM_CMD}" ;;
    bench)   # the GPU benchmarks, one after another (alone on the host: run this job by itself)
      run bench env JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false sh -c "${BENCH_CMD:?set BENCH_CMD}" ;;
    *) echo "unknown job $job"; exit 2 ;;
  esac
done
wait
if [ -f results/t_small.json ] && [ -f results/t_large.json ]; then   # both halves done: seal the full table
  python experiments/merge_table_partials.py --part 2,4,8,16:results/p_small.json \
      --part 32,64:results/p_large.json --out results/table_partial.json > "$OUT/log/merge.txt" 2>&1 &&
  python -m nuna_jax.e2e.llm.collective_table --partial results/table_partial.json >> "$OUT/log/merge.txt" 2>&1
fi
nproc > "$OUT/log/host.txt"; date -u >> "$OUT/log/host.txt"
tar czf "$OUT/batch.tgz" results experiments/out benchmarks/out nuna_jax/e2e/llm/data/table2_collectives.json "$OUT/log" 2>/dev/null
tail -n 3 "$OUT"/log/*.txt

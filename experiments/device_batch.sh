#!/usr/bin/env bash
# Reruns on the lent 16-CPU host (JAX on CPU), everything at once, each bounded by LIMIT seconds:
#   bash experiments/device_batch.sh "table fig9 fig13 validation optim"   (names to run)
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
    table) run table python -m nuna_jax.models.llm.collective_table --jobs "$TABLE_JOBS" --partial results/table_partial.json ;;
    fig9) run fig9 python experiments/fig9_speedup.py --jobs "${FIG9_JOBS:-4}" ;;
    fig13) run fig13 python experiments/fig13_nar_granularity.py ;;
    validation) run validation python experiments/validate_analytical.py ;;
    optim) run optim sh -c "${OPTIM_CMD:?set OPTIM_CMD}" ;;
    *) echo "unknown job $job"; exit 2 ;;
  esac
done
wait
nproc > "$OUT/log/host.txt"; date -u >> "$OUT/log/host.txt"
tar czf "$OUT/batch.tgz" results experiments/out nuna_jax/models/llm/data/table2_collectives.json "$OUT/log" 2>/dev/null
tail -n 3 "$OUT"/log/*.txt

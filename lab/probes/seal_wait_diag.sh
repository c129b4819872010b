# Why a sealed verify on a GPU waits for a CPU (docs/verify.md, "On the GPU: the sealed harness's run"): one
# identical-kernel KernelBench problem verified with the whole seal, with the CPU split, the cgroup or the sandbox
# off, with --threads 1 and with OMP_NUM_THREADS=1. Per run: every python thread's schedstat (CPU ns, run-queue
# wait ns) and CPU every 1.5 s (s_N.txt: which threads waited) and their states 7 s in (ps_N.txt); each result's
# verdict, wait fractions and CPU split on stdout; all of it in $OUT/diag.tgz. About 2 minutes:
#     bash lab/probes/seal_wait_diag.sh            (on the GPU machine, KernelBench in .kb)
source lab/gpu/gpu_setup.sh >/dev/null 2>&1
P=.kb/level1/1_Square_matrix_multiplication_.py
i=0
for s in "none::" "split::" "cgroup::" "none:--threads 1:" "none::OMP_NUM_THREADS=1" "sandbox::"; do
 i=$((i+1)); off=${s%%:*}; rest=${s#*:}; fl=${rest%%:*}; envv=${rest#*:}; [ "$off" = none ] && off=""
 (snap() { for p in $(pgrep -f python); do for t in /proc/$p/task/*; do echo "$p ${t##*/} $(cat $t/comm 2>/dev/null) $(cat $t/schedstat 2>/dev/null) cpu=$(awk '{print $39}' $t/stat 2>/dev/null)"; done; done; }; for k in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "== $(date +%s.%N)"; snap; sleep 1.5; done > /tmp/s_$i.txt) &
 (sleep 7; ps -eLo pid,tid,psr,stat,pcpu,comm,args --sort=pid | grep -v " ps \| grep \|sleep" | grep -i "python\|headroom" | cut -c1-150 > /tmp/ps_$i.txt) &
 env HEADROOM_VERIFY_SEAL_OFF=$off $envv timeout 100 headroom verify $P $P --json $fl > /tmp/v_$i.json 2>/tmp/v_$i.err
 python3 -c "
import json,sys
d=json.load(open('/tmp/v_$i.json')); r=d[0] if isinstance(d,list) else d
def find(o,k):
    if isinstance(o,dict):
        for a,b in o.items():
            if a==k: return b
            x=find(b,k)
            if x is not None: return x
    elif isinstance(o,list):
        for b in o:
            x=find(b,k)
            if x is not None: return x
print('$s', r.get('verdict'), r.get('speedup'), str(r.get('reason'))[:150], find(r,'wait_fraction'), find(r,'cpu_split'))
" 2>&1 | tail -2
 wait
done
tar czf $OUT/diag.tgz -C /tmp $(cd /tmp; ls v_*.json v_*.err ps_*.txt s_*.txt)

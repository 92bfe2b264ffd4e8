#!/bin/bash
# gpupool attempt j-42.1, rendered by gpupool.backends.slurm.script: do not edit.
#SBATCH --job-name=gpupool-j-42.1
#SBATCH --comment=gpupool-key=j-42.1
#SBATCH --partition=t4
#SBATCH --account=research
#SBATCH --qos=normal
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=12288M
#SBATCH --gres=gpu:t4:2
#SBATCH --time=62
#SBATCH --output=/srv/gpupool/slurm/pool-t4/j-42.1/output.log
#SBATCH --open-mode=append
#SBATCH --chdir=/srv/gpupool/slurm/pool-t4/j-42.1/work
#SBATCH --export=NONE
#SBATCH --no-requeue

printf '%s\n' "$SLURM_JOB_ID" > /srv/gpupool/slurm/pool-t4/j-42.1/slurm_job_id

# --export=NONE gives no HOME: the user's home on this node, else the work dir.
HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
[ -n "$HOME" ] && [ -d "$HOME" ] || HOME=/srv/gpupool/slurm/pool-t4/j-42.1/work
export HOME
export GPUPOOL_JOB_ID=j-42
export NOTE='it'"'"'s $HOME'

# A trap handler (unlike an ignored signal) is reset when the command is exec'd: the
# command still gets SIGTERM, and this shell lives on to record how it ended.
trap : TERM
timeout --signal=TERM --kill-after=30s 3600s python train.py --lr 0.1
rc=$?
reason=exited
if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$SECONDS" -ge 3600 ]; then
    reason=max_runtime
fi
printf 'exit_code=%d reason=%s max_runtime_s=3600\n' "$rc" "$reason" > /srv/gpupool/slurm/pool-t4/j-42.1/exit_code
exit "$rc"

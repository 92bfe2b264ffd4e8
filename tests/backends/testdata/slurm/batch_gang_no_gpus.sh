#!/bin/bash
# gpupool attempt j-42.3, rendered by gpupool.backends.slurm.script: do not edit.
#SBATCH --job-name=gpupool-j-42.3
#SBATCH --comment=gpupool-key=j-42.3
#SBATCH --partition=t4
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1024M
#SBATCH --output=/srv/gpupool/slurm/pool-t4/j-42.3/output.log
#SBATCH --open-mode=append
#SBATCH --chdir=/srv/gpupool/slurm/pool-t4/j-42.3/work
#SBATCH --export=NONE
#SBATCH --no-requeue

printf '%s\n' "$SLURM_JOB_ID" > /srv/gpupool/slurm/pool-t4/j-42.3/slurm_job_id

# --export=NONE gives no HOME: the user's home on this node, else the work dir.
HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
[ -n "$HOME" ] && [ -d "$HOME" ] || HOME=/srv/gpupool/slurm/pool-t4/j-42.3/work
export HOME
export GPUPOOL_JOB_ID=j-42
export CUDA_VISIBLE_DEVICES=

# A trap handler (unlike an ignored signal) is reset when the command is exec'd: the
# command still gets SIGTERM, and this shell lives on to record how it ended.
trap : TERM
srun --export=ALL --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 python train.py --lr 0.1
rc=$?
reason=exited
printf 'exit_code=%d reason=%s\n' "$rc" "$reason" > /srv/gpupool/slurm/pool-t4/j-42.3/exit_code
exit "$rc"

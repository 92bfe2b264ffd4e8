#!/bin/bash
# gpupool attempt j-42.1, rendered by gpupool.backends.slurm.script: do not edit.
#SBATCH --job-name=gpupool-j-42.1
#SBATCH --comment=gpupool-key=j-42.1
#SBATCH --partition=t4
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1024M
#SBATCH --gres=gpu:t4:2
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

# Runs the command in ghcr.io/acme/train:1.4 on each node (gpupool.backends.slurm.container).
cat > /srv/gpupool/slurm/pool-t4/j-42.1/container.sh <<'GPUPOOL_CONTAINER_EOF'
#!/bin/bash
# Runs the job's command in its image on this node, with this node's GPUs of the job.
set -u
devices=()
inside=
n=0
gpus=${CUDA_VISIBLE_DEVICES:-}
for i in ${gpus//,/ }; do
    devices+=(--bind "/dev/nvidia$i")
    inside="$inside${inside:+,}$n"
    n=$((n + 1))
done
# --cleanenv: the container gets the job's variables only (APPTAINERENV_<name>).
export APPTAINERENV_GPUPOOL_JOB_ID="$GPUPOOL_JOB_ID"
export APPTAINERENV_HOME=/srv/storage/team-a/home/alice
export APPTAINERENV_CUDA_VISIBLE_DEVICES="$inside"
exec apptainer exec "${devices[@]}" --contain --cleanenv --no-home --net --network=none --pwd=/srv/gpupool/slurm/pool-t4/j-42.1/work --bind /srv/gpupool/slurm/pool-t4/j-42.1/work:/srv/gpupool/slurm/pool-t4/j-42.1/work --bind /srv/storage/team-a/shared:/srv/storage/team-a/shared --bind /srv/storage/team-a/shared/imagenet:/data:ro --nv --writable-tmpfs docker://ghcr.io/acme/train:1.4 python train.py --lr 0.1
GPUPOOL_CONTAINER_EOF

# A trap handler (unlike an ignored signal) is reset when the command is exec'd: the
# command still gets SIGTERM, and this shell lives on to record how it ended.
trap : TERM
srun --export=ALL --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/bash /srv/gpupool/slurm/pool-t4/j-42.1/container.sh
rc=$?
reason=exited
printf 'exit_code=%d reason=%s\n' "$rc" "$reason" > /srv/gpupool/slurm/pool-t4/j-42.1/exit_code
exit "$rc"

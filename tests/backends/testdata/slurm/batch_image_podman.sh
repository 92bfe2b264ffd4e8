#!/bin/bash
# gpupool attempt j-42.1, rendered by gpupool.backends.slurm.script: do not edit.
#SBATCH --job-name=gpupool-j-42.1
#SBATCH --comment=gpupool-key=j-42.1
#SBATCH --partition=t4
#SBATCH --nodes=1
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
    devices+=(--device "/dev/nvidia$i:/dev/nvidia$i")
    inside="$inside${inside:+,}$n"
    n=$((n + 1))
done
# Root runs the container as root; anyone else as themselves (rootless, keep-id).
if [ "$(id -u)" -eq 0 ]; then user=(--user 0:0); else user=(--userns keep-id); fi
podman run --name "gpupool-j-42.1-$SLURM_NODEID" "${user[@]}" "${devices[@]}" --env "CUDA_VISIBLE_DEVICES=$inside" --rm --log-driver=none --network=none --workdir=/srv/gpupool/slurm/pool-t4/j-42.1/work --volume /srv/gpupool/slurm/pool-t4/j-42.1/work:/srv/gpupool/slurm/pool-t4/j-42.1/work --volume /srv/storage/team-a/shared:/srv/storage/team-a/shared --volume /srv/storage/team-a/shared/imagenet:/data:ro --shm-size=8192m --authfile=/etc/gpupool/acme.json --env=HOME=/srv/storage/team-a/home/alice --env=GPUPOOL_JOB_ID --entrypoint=python ghcr.io/acme/train:1.4 train.py --lr 0.1 &
pid=$!
trap : TERM INT
wait "$pid"; rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
podman rm -f "gpupool-j-42.1-$SLURM_NODEID" >/dev/null 2>&1
exit "$rc"
GPUPOOL_CONTAINER_EOF

# A trap handler (unlike an ignored signal) is reset when the command is exec'd: the
# command still gets SIGTERM, and this shell lives on to record how it ended.
trap : TERM
/bin/bash /srv/gpupool/slurm/pool-t4/j-42.1/container.sh
rc=$?
podman rm -f "gpupool-j-42.1-$SLURM_NODEID" >/dev/null 2>&1 || true
reason=exited
printf 'exit_code=%d reason=%s\n' "$rc" "$reason" > /srv/gpupool/slurm/pool-t4/j-42.1/exit_code
exit "$rc"

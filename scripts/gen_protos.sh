#!/usr/bin/env bash
# Regenerate the committed gRPC stubs (*_pb2.py, *_pb2_grpc.py) from the .proto files
# of the node-health client and the log funnel. Needs grpcio-tools (test extra).
# Run from anywhere; paths are relative to the repository root so the generated
# modules import each other as `relaunch.launcher.health...` / `relaunch.launcher.funnel...` (through the relaunch/ links).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
protos=(relaunch/launcher/health/node_health.proto relaunch/launcher/funnel/log_funnel.proto)
"$PY" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. "${protos[@]}"
for p in "${protos[@]}"; do
  base="${p%.proto}"
  "$PY" -c "import importlib, sys; importlib.import_module(sys.argv[1]); importlib.import_module(sys.argv[2])" \
    "${base//\//.}_pb2" "${base//\//.}_pb2_grpc"
done
echo "gen_protos: regenerated ${protos[*]}"

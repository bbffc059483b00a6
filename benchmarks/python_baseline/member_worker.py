"""One ensemble member in its own process: the worker side of the Python baseline.

server.py starts one of these per member with torch.multiprocessing (spawn).
It is a module of its own so that the spawned process imports only torch and
numpy, not gRPC and the stubs.

Protocol (both queues are torch.multiprocessing queues):
  requests: (request_id, x) or None to stop. x is a numpy array (transport
            "pickle") or a torch tensor, moved to shared memory by
            torch.multiprocessing's reducers (transport "shared").
  results:  (request_id, member_index, y, error). y is the member's output in
            the same form as x came in (numpy array or shared tensor), error a
            string or None. The first message, once the model is loaded and
            warmed up, is ("ready", member_index, None, error).
"""
import os
import queue
import signal

import numpy as np
import torch


def run_member(index, model_path, input_shape, transport, requests, results):
    """The worker loop: load the TorchScript member, then answer requests until None."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)  # one intra-op thread per member process, as one host thread each
    parent = os.getppid()
    try:
        model = torch.jit.load(model_path, map_location="cpu")
        model.eval()
        with torch.inference_mode():
            for _ in range(2):  # warm-up: the profiling executor optimises on the first calls
                model(torch.zeros([1] + list(input_shape), dtype=torch.float32))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which exits
        results.put(("ready", index, None, f"{model_path}: {e}"))
        return
    results.put(("ready", index, None, None))

    with torch.inference_mode():
        while True:
            try:
                item = requests.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the server died without telling us
                    return
                continue
            if item is None:
                return
            request_id, x = item
            try:
                if transport == "shared":
                    y = model(x)
                    if not isinstance(y, torch.Tensor):
                        raise TypeError(f"forward returned {type(y).__name__}, expected one tensor")
                    results.put((request_id, index, y, None))
                else:
                    y = model(torch.from_numpy(x))
                    if not isinstance(y, torch.Tensor):
                        raise TypeError(f"forward returned {type(y).__name__}, expected one tensor")
                    results.put((request_id, index, np.ascontiguousarray(y.numpy()), None))
            except Exception as e:  # noqa: BLE001 - the request fails, the worker keeps serving
                results.put((request_id, index, None, f"{type(e).__name__}: {e}"))

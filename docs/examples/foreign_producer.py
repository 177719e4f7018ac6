"""Enqueue a culex task without culex: plain redis-py and the documented enqueue script.

Usage: python foreign_producer.py REDIS_URL ENQUEUE_LUA_PATH QUEUE TYPE PARAMS_JSON
Prints the task id. Any language with a Redis client can do the same (docs/wire-format.md).
"""

import sys
import uuid

import redis


def enqueue(client, script, prefix, queue, job_type, params_json, delay_ms=0):
    task_id = uuid.uuid4().hex
    base = f"{prefix}:{{{queue}}}"  # the queue's hash tag: every key in one slot
    keys = [f"{base}:task:{task_id}", f"{base}:waiting", f"{base}:scheduled", f"{base}:signal"]
    args = [task_id, job_type, queue, params_json, "", delay_ms, 4]
    state, _ = script(keys=keys, args=args)
    client.sadd(f"{prefix}:queues", queue)  # optional: lets `culex queues` list it
    return task_id, state.decode()


def main():
    url, lua_path, queue, job_type, params_json = sys.argv[1:6]
    client = redis.Redis.from_url(url)
    with open(lua_path) as f:
        script = client.register_script(f.read())  # EVALSHA, loading on NOSCRIPT
    task_id, state = enqueue(client, script, "culex", queue, job_type, params_json)
    print(task_id, state)
    with open(lua_path.replace("enqueue.lua", "wait.lua")) as f:
        wait = client.register_script(f.read())
    state, result, last_error, _ = wait_for_end(client, wait, "culex", queue, task_id)
    if state == b"succeeded":
        print("succeeded", result.decode())
    elif state == b"dead":
        print("dead", last_error.decode())
    else:
        print("timeout" if state else "not found")


def wait_for_end(client, wait, prefix, queue, task_id, blocks=10):
    """Wait up to ``blocks`` seconds for the task's end, without polling: wait.lua reads
    it or marks the task, and the script that ends the task wakes the BLMOVE on its done
    list (docs/wire-format.md). Returns [state, result, last_error, type]."""
    base = f"{prefix}:{{{queue}}}"
    keys = [f"{base}:task:{task_id}", f"{base}:done:{task_id}"]
    end = wait(keys=keys)
    for _ in range(blocks):
        if end[0] in (b"succeeded", b"dead", None):
            break
        pipe = client.pipeline(transaction=False)  # the read rides behind the block
        pipe.blmove(keys[1], keys[1], 1, "LEFT", "RIGHT")
        wait(keys=keys, client=pipe)
        end = pipe.execute()[1]
    return end


if __name__ == "__main__":
    main()

"""Enqueue a culex task without culex: plain redis-py and the documented enqueue script.

Usage: python foreign_producer.py REDIS_URL ENQUEUE_LUA_PATH QUEUE TYPE PARAMS_JSON
Prints the task id. Any language with a Redis client can do the same (docs/wire-format.md).
"""

import sys
import time
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
    # wait for the result, as a foreign consumer of results would
    key = f"culex:{{{queue}}}:task:{task_id}"
    for _ in range(1000):
        fields = client.hmget(key, "state", "result", "last_error")
        if fields[0] in (b"succeeded", b"dead"):
            print(fields[0].decode(), (fields[1] or fields[2] or b"").decode())
            return
        time.sleep(0.01)
    print("timeout")


if __name__ == "__main__":
    main()

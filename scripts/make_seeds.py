"""Generate the task suites in seeds/ (deterministic: a fixed RNG seed). The YAML files are the data;
this script only documents how they were made. Usage: python scripts/make_seeds.py"""

from __future__ import annotations

import random
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "seeds"
SUBMIT_NUMBER = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Submit the final answer. Ends the task.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "number"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}
SUBMIT_TEXT = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Submit the final answer. Ends the task.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}
SYSTEM = (
    "You are an agent that solves the user's task by calling tools. Call one tool at a time and wait for "
    "its result. When you know the answer, call submit with it."
)


def tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def aggregation(rng: random.Random) -> dict:
    seeds = []
    for index in range(10):
        count = rng.randint(2, 4)
        records = {
            f"r{index}{k}": {"amount": rng.randint(5, 90), "region": rng.choice(["north", "south"])}
            for k in range(count)
        }
        seeds.append(
            {
                "id": f"agg-{index:02d}",
                "request": "Read every record and submit the sum of their amounts.",
                "expected": sum(r["amount"] for r in records.values()),
                "data": {"records": records},
            }
        )
    return {
        "suite": "aggregation",
        "version": 1,
        "description": "List and read records through tools, compute a sum, submit it (the paper's task shape).",
        "system_prompt": SYSTEM,
        "tools": [
            tool("list_records", "List the ids of all records.", {}, []),
            tool("read_record", "Read one record by id.", {"record_id": {"type": "string"}}, ["record_id"]),
            SUBMIT_NUMBER,
        ],
        "dry_run": {
            "list_records": {"kind": "keys", "table": "records", "result_key": "record_ids"},
            "read_record": {"kind": "lookup", "table": "records", "key": "record_id"},
            "submit": {"kind": "submit", "key": "answer"},
        },
        "seeds": seeds,
    }


def dependency_chain(rng: random.Random) -> dict:
    seeds = []
    names = ["ana", "bo", "cy", "dee", "eli", "fay", "gus", "hal", "ivy", "jon"]
    for index, name in enumerate(names):
        user_id = f"u{rng.randint(100, 999)}"
        order_id = f"o{rng.randint(1000, 9999)}"
        total = rng.randint(10, 500)
        seeds.append(
            {
                "id": f"chain-{index:02d}",
                "request": f"What is the total of the latest order of the user {name}@example.com? Submit it.",
                "expected": total,
                "data": {
                    "users": {f"{name}@example.com": {"user_id": user_id}},
                    "latest_orders": {user_id: {"order_id": order_id}},
                    "orders": {order_id: {"order_id": order_id, "total": total}},
                },
            }
        )
    return {
        "suite": "dependency-chain",
        "version": 1,
        "description": "Each call needs an id returned by the previous call: email -> user -> order -> total.",
        "system_prompt": SYSTEM,
        "tools": [
            tool("find_user", "Find a user by email.", {"email": {"type": "string"}}, ["email"]),
            tool("latest_order", "The latest order id of a user.", {"user_id": {"type": "string"}}, ["user_id"]),
            tool("get_order", "Read an order by id.", {"order_id": {"type": "string"}}, ["order_id"]),
            SUBMIT_NUMBER,
        ],
        "dry_run": {
            "find_user": {"kind": "lookup", "table": "users", "key": "email"},
            "latest_order": {"kind": "lookup", "table": "latest_orders", "key": "user_id"},
            "get_order": {"kind": "lookup", "table": "orders", "key": "order_id"},
            "submit": {"kind": "submit", "key": "answer"},
        },
        "seeds": seeds,
    }


def ops(rng: random.Random) -> dict:
    seeds = []
    for index in range(10):
        pod = f"{rng.choice(['api', 'web', 'worker', 'db'])}-{rng.randint(1, 9)}"
        status = rng.choice(["Running", "CrashLoopBackOff", "Pending", "Running"])
        seeds.append(
            {
                "id": f"ops-{index:02d}",
                "request": f"What is the status of pod {pod}? Submit the status.",
                "expected": status,
                "data": {"pods": {pod: {"name": pod, "status": status, "restarts": rng.randint(0, 7)}}},
            }
        )
    return {
        "suite": "ops",
        "version": 1,
        "description": "Single-question operations probes (the pod-status probe): one lookup, then submit.",
        "system_prompt": SYSTEM,
        "tools": [
            tool("pod_status", "Get the status of a Kubernetes pod by name.", {"name": {"type": "string"}}, ["name"]),
            SUBMIT_TEXT,
        ],
        "dry_run": {
            "pod_status": {"kind": "lookup", "table": "pods", "key": "name"},
            "submit": {"kind": "submit", "key": "answer"},
        },
        "seeds": seeds,
    }


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for maker in (aggregation, dependency_chain, ops):
        suite = maker(random.Random(20260926))
        path = OUT / f"{suite['suite']}.yaml"
        path.write_text(
            "# Generated by scripts/make_seeds.py (fixed RNG seed); data, not code.\n"
            + yaml.safe_dump(suite, sort_keys=False, width=120)
        )
        print(path)


if __name__ == "__main__":
    main()

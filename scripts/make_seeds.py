"""Generate the task suites in seeds/ (deterministic: a fixed RNG seed). The YAML files are the data;
this script is the record of how they were made. Usage: python scripts/make_seeds.py (rewrites seeds/*.yaml).

Seeds must differ in substance, not only in a name: eight seeds that share one request wording and one data
shape give one trajectory eight times, and a bootstrap interval of width zero. So each suite mixes
- several request templates (what is asked), each with several phrasings (order of information, extra context,
  units), recorded per seed as `template`;
- different numbers of tool calls an ideal solver needs (ops: 1-3 lookups; aggregation: 2-7 records;
  dependency-chain: chains of 2-4 hops);
- varied data shapes: table sizes, distractor rows, nested and optional fields, numbers written as numbers or
  as strings (only in tool results: every tool argument keeps its schema type).
The first seeds of each suite (matrices run the first `count`) already cover every template.
`expected` is computed here from the data; tests/test_tasks_modes.py solves every seed through the dry-run
tools with a scripted solver and checks it reaches `expected`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent.parent / "seeds"
RNG_SEED = 20260926
SUITE_VERSION = 2  # 2: seeds differ in template, steps and data shape (1: one wording and one shape per suite)
SEEDS_PER_SUITE = 12
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


def money(value: float) -> float:
    return round(value + 1e-9, 2)


def join_names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ---------------------------------------------------------------------------------------------------- ops

PHASES_UNHEALTHY = ["Pending", "CrashLoopBackOff", "Failed", "Unknown"]
REASONS = ["OOMKilled", "Error", "Completed", "ContainerCannotRun"]
SERVICES = ["api", "web", "worker", "db", "cache", "auth", "billing", "search", "ingest", "gateway"]
NAMESPACES = ["payments", "default", "storefront", "platform"]

OPS_PHRASES: dict[str, list[str]] = {
    "status": [
        "What is the status of pod {a}? Submit the status.",
        "Pod {a} in namespace {ns} raised an alert a few minutes ago. Look up its current phase and submit it.",
        "Submit the phase (for example Running or Pending) that pod {a} reports right now.",
    ],
    "restarts": [
        "How many times has pod {a} restarted? Submit the total restart count over all its containers.",
        "Our dashboard shows restarts in namespace {ns}. Check pod {a} and submit its total number of restarts.",
    ],
    "termination": [
        "Pod {a} restarted recently. Why did its last termination happen? Submit the reason exactly as reported.",
        "Submit the reason of the last container termination of pod {a} (for example OOMKilled).",
    ],
    "compare-restarts": [
        "Which of the pods {pods} has restarted more often? Submit its name.",
        "Of the pods {pods}, submit the name of the one with the most restarts (count all containers).",
    ],
    "count-running": [
        "How many of the pods {pods} are in phase Running? Submit the count.",
        "Before the rollout in namespace {ns} we need the pods {pods} up. Submit how many of them are Running.",
    ],
    "find-unhealthy": [
        "Exactly one of the pods {pods} is not Running. Submit its name.",
        "One pod among {pods} is unhealthy (its phase is not Running). Which one? Submit the pod name.",
    ],
}
# (template, pods asked about, row shape); the first eight cover every template and 1-3 lookups.
OPS_PLAN = [
    ("status", 1, "flat"),
    ("compare-restarts", 2, "flat"),
    ("restarts", 1, "nested"),
    ("find-unhealthy", 3, "flat-str"),
    ("termination", 1, "flat"),
    ("count-running", 3, "nested"),
    ("status", 1, "nested"),
    ("compare-restarts", 3, "flat-str"),
    ("restarts", 1, "flat-str"),
    ("count-running", 2, "flat"),
    ("termination", 1, "nested"),
    ("find-unhealthy", 3, "nested"),
]


def pod_name(rng: random.Random, service: str) -> str:
    style = rng.randrange(3)
    if style == 0:  # StatefulSet ordinal
        return f"{service}-{rng.randint(0, 12)}"
    alphabet = "abcdefghjkmnpqrstvwxz2456789"
    template = "".join(rng.choice(alphabet) for _ in range(5))
    suffix = "".join(rng.choice(alphabet) for _ in range(4))
    if not any(c.isdigit() for c in template + suffix):
        suffix = suffix[:3] + str(rng.randint(2, 9))
    return f"{service}-{template}-{suffix}" if style == 1 else f"{service}-{rng.randint(1, 9)}{suffix}"


def pod_row(rng: random.Random, name: str, phase: str, restarts: int, shape: str, reason: str | None) -> dict:
    if shape == "nested":
        split = rng.randint(0, restarts)
        row: dict[str, Any] = {
            "name": name,
            "status": {"phase": phase, "ready": phase == "Running"},
            "containers": [{"name": "app", "restarts": split}, {"name": "sidecar", "restarts": restarts - split}],
        }
    else:
        row = {"name": name, "status": phase, "restarts": str(restarts) if shape == "flat-str" else restarts}
    if rng.random() < 0.5:
        row["node"] = f"node-{rng.choice('abc')}{rng.randint(1, 6)}"  # optional field
    if reason is not None:
        row["last_termination"] = {"reason": reason, "exit_code": 137 if reason == "OOMKilled" else rng.randint(0, 2)}
    return row


def ops(rng: random.Random) -> dict:
    seeds = []
    plan = [entry[0] for entry in OPS_PLAN]
    for index, (template, count, shape) in enumerate(OPS_PLAN):
        services = rng.sample(SERVICES, count)
        names: list[str] = []
        while len(names) < count:
            candidate = pod_name(rng, services[len(names)])
            if candidate not in names:
                names.append(candidate)
        phases = ["Running"] * count
        restarts = rng.sample(range(0, 15), count)  # distinct: a comparison has one answer
        reasons: list[str | None] = [None] * count
        if template == "status":
            phases = [rng.choice(["Running", *PHASES_UNHEALTHY])]
        elif template == "find-unhealthy":
            phases[rng.randrange(count)] = rng.choice(PHASES_UNHEALTHY)
        elif template == "count-running":
            phases = [rng.choice(["Running", "Running", *PHASES_UNHEALTHY]) for _ in range(count)]
        elif template == "termination":
            restarts = [rng.randint(1, 9)]
            reasons = [rng.choice(REASONS)]
        rows = {
            name: pod_row(rng, name, phase, n, shape, reason)
            for name, phase, n, reason in zip(names, phases, restarts, reasons, strict=True)
        }
        for _ in range(rng.randint(0, 4)):  # distractor pods: same services, other names
            other = pod_name(rng, rng.choice(services))
            if other not in rows:
                phase = rng.choice(["Running", *PHASES_UNHEALTHY])
                rows[other] = pod_row(rng, other, phase, rng.randint(0, 9), shape, None)
        expected: Any = {
            "status": phases[0],
            "restarts": restarts[0],
            "termination": reasons[0],
            "compare-restarts": names[restarts.index(max(restarts))],
            "count-running": phases.count("Running"),
            "find-unhealthy": next((n for n, p in zip(names, phases, strict=True) if p != "Running"), None),
        }[template]
        phrase = OPS_PHRASES[template][plan[:index].count(template) % len(OPS_PHRASES[template])]
        request = phrase.format(a=names[0], pods=join_names(names), ns=rng.choice(NAMESPACES))
        ordered = dict(sorted(rows.items(), key=lambda _item: rng.random()))  # the asked pods are not always first
        seeds.append(
            {
                "id": f"ops-{index:02d}",
                "template": template,
                "request": request,
                "expected": expected,
                "data": {"pods": ordered},
            }
        )
    return {
        "suite": "ops",
        "version": SUITE_VERSION,
        "description": "Operations questions about Kubernetes pods: one to three pod lookups (status, restart counts, "
        "termination reasons, comparisons), then submit.",
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


# -------------------------------------------------------------------------------------------- aggregation

REGIONS = ["north", "south", "east", "west"]
AGG_PHRASES: dict[str, list[str]] = {
    "sum": [
        "Read every record and submit the sum of their amounts.",
        "What is the total amount across all records? Submit it as a number.",
        "List the records, add up their amounts and submit the total.",
    ],
    "sum-region": [
        "Submit the total amount of the records in region {region}; ignore records from other regions.",
        "Records belong to regions. What do the amounts of the {region} records add up to? Submit that sum.",
    ],
    "count-above": [
        "How many records have an amount greater than {threshold}? Submit the count.",
        "Finance flags every record whose amount exceeds {threshold}. Submit how many records would be flagged.",
    ],
    "max": [
        "Submit the largest single amount among the records.",
        "Look through all records and submit the highest amount you find.",
    ],
    "mean": [
        "Submit the average amount per record, rounded to two decimals.",
        "What is the mean of the record amounts? Round it to two decimals and submit it.",
    ],
}
CENTS_NOTE = " Note: some systems store amounts in cents, but answer in euros."
# (template, number of records, record shape); the first eight cover every template and shape.
AGG_PLAN = [
    ("sum", 2, "number"),
    ("sum-region", 5, "string"),
    ("max", 3, "nested"),
    ("count-above", 6, "number"),
    ("sum", 4, "cents"),
    ("mean", 3, "number"),
    ("sum-region", 7, "nested"),
    ("sum", 5, "string"),
    ("count-above", 4, "cents"),
    ("max", 6, "string"),
    ("sum-region", 3, "cents"),
    ("mean", 7, "nested"),
]


def record_ids(rng: random.Random, count: int) -> list[str]:
    style = rng.randrange(3)
    numbers = rng.sample(range(1, 999), count)
    if style == 0:
        return [f"r{n}" for n in numbers]
    if style == 1:
        return [f"rec-{n:03d}" for n in numbers]
    return [f"INV-{2000 + n}" for n in numbers]


def record_row(rng: random.Random, amount: float, region: str, shape: str) -> dict[str, Any]:
    if shape == "cents":
        row: dict[str, Any] = {"amount_cents": round(amount * 100), "region": region}
    elif shape == "string":
        row = {"amount": f"{amount:.2f}", "region": region}
    elif shape == "nested":
        row = {"amount": {"value": amount, "currency": "EUR"}, "region": region}
    else:
        row = {"amount": amount, "region": region}
    if rng.random() < 0.4:
        row["note"] = rng.choice(["late payment", "manual entry", "imported", "adjusted"])  # optional field
    return row


def aggregation(rng: random.Random) -> dict:
    seeds = []
    plan = [entry[0] for entry in AGG_PLAN]
    for index, (template, count, shape) in enumerate(AGG_PLAN):
        whole = shape == "number" or rng.random() < 0.5
        amounts = [float(rng.randint(5, 90)) if whole else money(rng.randint(500, 9000) / 100) for _ in range(count)]
        region = rng.choice(REGIONS)
        regions = [rng.choice(REGIONS) for _ in range(count)]
        if template == "sum-region":  # at least one record in the region and at least one outside it
            regions[0] = region
            regions[-1] = rng.choice([r for r in REGIONS if r != region])
            rng.shuffle(regions)
        threshold = 0
        if template == "count-above":
            candidates = [t for t in range(10, 90, 5) if all(abs(a - t) > 0.5 for a in amounts)]
            threshold = rng.choice(candidates)
        ids = record_ids(rng, count)
        records = {i: record_row(rng, a, r, shape) for i, a, r in zip(ids, amounts, regions, strict=True)}
        expected = {
            "sum": money(sum(amounts)),
            "sum-region": money(sum(a for a, r in zip(amounts, regions, strict=True) if r == region)),
            "count-above": sum(a > threshold for a in amounts),
            "max": max(amounts),
            "mean": money(sum(amounts) / count),
        }[template]
        if isinstance(expected, float) and expected.is_integer():
            expected = int(expected)
        phrase = AGG_PHRASES[template][plan[:index].count(template) % len(AGG_PHRASES[template])]
        request = phrase.format(region=region, threshold=threshold) + (CENTS_NOTE if shape == "cents" else "")
        seeds.append(
            {
                "id": f"agg-{index:02d}",
                "template": template,
                "request": request,
                "expected": expected,
                "data": {"records": records},
            }
        )
    return {
        "suite": "aggregation",
        "version": SUITE_VERSION,
        "description": "List and read 2-7 records through tools, aggregate their amounts (sum, sum over a region, "
        "count above a threshold, maximum, mean), submit it (the paper's task shape).",
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


# ---------------------------------------------------------------------------------------- dependency-chain

FIRST = ["ana", "bo", "cy", "dee", "eli", "fay", "gus", "hal", "ivy", "jon", "kim", "lou", "mo", "nia", "oz", "pia"]
DOMAINS = ["example.com", "example.org", "shop.example.net"]
CHAIN_PHRASES: dict[str, list[str]] = {
    "total-by-user-id": [
        "Customer {uid} placed an order recently. What was the total of their latest order? Submit it.",
        "Submit the total of the latest order of the user whose user id is {uid}.",
    ],
    "total-by-email": [
        "What is the total of the latest order of the user {email}? Submit it.",
        "A customer writes from {email} about their most recent order. Find that order and submit its total.",
        "For {email}: look up the user, then their latest order, and submit that order's total.",
    ],
    "item-count": [
        "How many items (summing the quantities) were in the latest order of the user {email}? Submit the number.",
        "The user {email} asks how many units their most recent order contained. Submit the total quantity.",
    ],
    "referrer-total": [
        "The user {email} was referred by another user. Submit the total of the latest order of that referrer.",
        "Find who referred {email}, then submit the total of the referrer's latest order.",
    ],
}
CENTS_TOTAL_NOTE = " Totals may be stored in cents; submit the amount in dollars."
# (template, order total shape); hops: total-by-user-id 2, total-by-email and item-count 3, referrer-total 4.
CHAIN_PLAN = [
    ("total-by-email", "number"),
    ("total-by-user-id", "string"),
    ("referrer-total", "nested"),
    ("item-count", "number"),
    ("total-by-email", "cents"),
    ("total-by-user-id", "nested"),
    ("referrer-total", "number"),
    ("total-by-email", "string"),
    ("item-count", "nested"),
    ("total-by-user-id", "cents"),
    ("referrer-total", "string"),
    ("total-by-email", "nested"),
]


def user_id(rng: random.Random, style: int) -> str:
    return [f"u{rng.randint(100, 9999)}", f"usr_{rng.randint(0, 9999):04d}", f"{rng.randint(10000, 99999)}"][style]


def order_id(rng: random.Random, style: int) -> str:
    return [f"o{rng.randint(1000, 9999)}", f"ord-{rng.randint(10000, 99999)}", f"A-{rng.randint(100, 999)}-X"][style]


def total_fields(total: float, shape: str) -> dict[str, Any]:
    if shape == "cents":
        return {"total_cents": round(total * 100)}
    if shape == "string":
        return {"total": f"{total:.2f}"}
    if shape == "nested":
        return {"total": {"amount": total, "currency": "USD"}}
    return {"total": total}


def dependency_chain(rng: random.Random) -> dict:
    seeds = []
    plan = [entry[0] for entry in CHAIN_PLAN]
    for index, (template, shape) in enumerate(CHAIN_PLAN):
        uid_style, oid_style = rng.randrange(3), rng.randrange(3)
        people = rng.sample(FIRST, rng.randint(2, 5))  # the asked user (and referrer) plus 0-3 others
        emails = [f"{p}@{rng.choice(DOMAINS)}" for p in people]
        uids: list[str] = []
        while len(uids) < len(people):
            candidate = user_id(rng, uid_style)
            if candidate not in uids:
                uids.append(candidate)
        users = {e: {"user_id": u, "name": p.title()} for e, u, p in zip(emails, uids, people, strict=True)}
        users[emails[0]]["referred_by"] = emails[1]  # the referrer chain starts at emails[0]
        for e in emails[1:]:
            if rng.random() < 0.4:
                users[e]["plan"] = rng.choice(["free", "pro"])  # optional field
        if rng.random() < 0.6:  # a look-alike address that is not the user asked about (a distractor row)
            users[f"{people[0]}.{rng.choice('bcdx')}@{DOMAINS[0]}"] = {"user_id": user_id(rng, uid_style), "name": "X"}
        latest_orders: dict[str, dict[str, Any]] = {}
        orders: dict[str, dict[str, Any]] = {}
        totals: dict[str, float] = {}
        quantities: dict[str, int] = {}
        for u in uids:
            for age in (1, 0):  # an older order (distractor) and the latest one
                oid = order_id(rng, oid_style)
                while oid in orders:
                    oid = order_id(rng, oid_style)
                total = money(rng.randint(1000, 50000) / 100) if rng.random() < 0.6 else float(rng.randint(10, 500))
                items = [
                    {"sku": f"SKU-{rng.randint(100, 999)}", "qty": rng.randint(1, 4)} for _ in range(rng.randint(1, 3))
                ]
                row: dict[str, Any] = {"order_id": oid, "user_id": u, **total_fields(total, shape)}
                if template == "item-count" or rng.random() < 0.5:
                    row["items"] = items
                orders[oid] = row
                if age == 0:
                    latest_orders[u] = {
                        "order_id": oid,
                        "placed_at": f"2026-0{rng.randint(1, 9)}-{rng.randint(10, 28)}",
                    }
                    totals[u] = total
                    quantities[u] = sum(item["qty"] for item in items)
        target = uids[1] if template == "referrer-total" else uids[0]
        expected: Any = quantities[target] if template == "item-count" else totals[target]
        if isinstance(expected, float) and expected.is_integer():
            expected = int(expected)
        phrase = CHAIN_PHRASES[template][plan[:index].count(template) % len(CHAIN_PHRASES[template])]
        request = phrase.format(uid=uids[0], email=emails[0])
        if shape == "cents" and template != "item-count":
            request += CENTS_TOTAL_NOTE
        shuffle = lambda table: dict(sorted(table.items(), key=lambda _item: rng.random()))  # noqa: E731
        seeds.append(
            {
                "id": f"chain-{index:02d}",
                "template": template,
                "request": request,
                "expected": expected,
                "data": {"users": shuffle(users), "latest_orders": shuffle(latest_orders), "orders": shuffle(orders)},
            }
        )
    return {
        "suite": "dependency-chain",
        "version": SUITE_VERSION,
        "description": "Each call needs an id returned by the previous call: chains of 2-4 hops "
        "(user id -> order -> total; email -> user -> order -> total or items; email -> referrer -> order -> total).",
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


# ------------------------------------------------------------------------------------------------ parallel

PARALLEL_SYSTEM = (
    "You are an agent that solves the user's task by calling tools. Tool calls that do not depend on each "
    "other's results can and should be made in parallel: put all of them in one turn (one message with several "
    "tool calls) instead of one at a time. When you know the answer, call submit with it."
)
# (city, IANA zone, UTC offset in hours): synthetic data tables, fixed offsets (no daylight saving).
PAR_CITIES = [
    ("Paris", "Europe/Paris", 1),
    ("Oslo", "Europe/Oslo", 1),
    ("Lima", "America/Lima", -5),
    ("Tokyo", "Asia/Tokyo", 9),
    ("Nairobi", "Africa/Nairobi", 3),
    ("Denver", "America/Denver", -7),
    ("Sydney", "Australia/Sydney", 10),
    ("Mumbai", "Asia/Kolkata", 5.5),
    ("Reykjavik", "Atlantic/Reykjavik", 0),
    ("Santiago", "America/Santiago", -4),
    ("Cairo", "Africa/Cairo", 2),
    ("Seoul", "Asia/Seoul", 9),
    ("Auckland", "Pacific/Auckland", 12),
    ("Toronto", "America/Toronto", -5),
]
PAR_TICKERS = ["ACME", "GLBX", "INTC", "UMBR", "WAYN", "STRK", "HOOL", "TYRL", "OSCP", "CYBD"]
PAR_CONDITIONS = ["sunny", "cloudy", "fog", "snow"]  # or "rain", which the conditional templates ask about
PAR_PHRASES: dict[str, list[str]] = {
    "warmest": [
        "What is the weather in {cities}? Submit the name of the warmest of them.",
        "I am choosing between {cities} for a weekend trip and want the warmest one today. Submit that city.",
    ],
    "temp-diff": [
        "By how many degrees Celsius do the temperatures in {cities} differ right now? Submit the difference "
        "as a positive number.",
        "Compare the current temperatures of {cities} and submit the warmer one minus the colder one in Celsius.",
    ],
    "stock-sum": [
        "What does it cost to buy one share each of {tickers}? Submit the total price in USD.",
        "Get the current stock prices of {tickers} and submit their sum.",
    ],
    "stock-highest": [
        "Which of the stocks {tickers} has the highest price per share? Submit its ticker.",
        "Look up the share prices of {tickers} and submit the ticker of the most expensive one.",
    ],
    "population-sum": [
        "How many people live in {cities} together? Submit the combined population.",
        "Our campaign targets {cities}. Submit the total population of these cities.",
    ],
    "timezone-gap": [
        "I am in {a} and want to call the office in {b}. Get the time zones of {a} and {b} and the weather in {b} "
        "at once. If it is raining in {b}, submit the word postpone; otherwise submit how many hours {b} is ahead "
        "of {a} (negative if behind).",
    ],
    "roadshow": [
        "Our roadshow goes to {a} unless it is raining there, and to {b} otherwise. Look up the weather in {a} and "
        "the populations of {a} and {b} in one go, then submit the population of the city we go to.",
    ],
}
# (template, parallel calls in the first turn, whether it rains where the conditional templates look); the first
# eight cover every template and both call counts; each conditional template is asked once with rain, once without.
PAR_PLAN: list[tuple[str, int, bool | None]] = [
    ("warmest", 3, None),
    ("stock-sum", 2, None),
    ("timezone-gap", 3, True),
    ("population-sum", 2, None),
    ("roadshow", 3, False),
    ("temp-diff", 2, None),
    ("stock-highest", 3, None),
    ("warmest", 2, None),
    ("population-sum", 3, None),
    ("timezone-gap", 3, False),
    ("roadshow", 3, True),
    ("stock-sum", 3, None),
    ("temp-diff", 2, None),
    ("stock-highest", 2, None),
]
PAR_TOOL_OF = {"weather": "get_weather", "population": "get_population", "stocks": "get_stock_price"}


def weather_row(rng: random.Random, temperature: int, condition: str, shape: int) -> dict[str, Any]:
    if shape == 1:
        return {"current": {"temperature": {"value": temperature, "unit": "C"}, "condition": condition}}
    if shape == 2:
        return {"temperature": f"{temperature} C", "condition": condition.title(), "humidity": rng.randint(20, 95)}
    return {"temperature_c": temperature, "condition": condition}


def population_row(population: int, shape: int) -> dict[str, Any]:
    return [
        {"population": population},
        {"population": {"value": population, "year": 2025}},
        {"population": f"{population:,}"},
    ][shape]


def stock_row(price: float, shape: int) -> dict[str, Any]:
    return [
        {"price": price, "currency": "USD"},
        {"quote": {"last": price, "currency": "USD"}},
        {"price": f"{price:.2f}", "currency": "USD"},
    ][shape]


def timezone_row(zone: str, offset: float, shape: int) -> dict[str, Any]:
    if shape == 1:
        hours, minutes = divmod(round(abs(offset) * 60), 60)
        return {"timezone": zone, "utc_offset": f"{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"}
    return {"timezone": zone, "utc_offset_hours": offset}


def parallel_tables(
    rng: random.Random, template: str, count: int, rain: bool | None
) -> tuple[dict[str, Any], list[dict], Any]:
    """One seed's data tables, its expected parallel calls and its expected answer."""
    shape = rng.randrange(3)
    cities = rng.sample(PAR_CITIES, count + 3)  # the asked cities first, then distractor rows
    if template == "timezone-gap":  # a gap of 0 hours would be a guessable answer: the second city is elsewhere
        other = next(i for i, c in enumerate(cities) if c[2] != cities[0][2])
        cities[1], cities[other] = cities[other], cities[1]
    names = [c[0] for c in cities]
    temps = rng.sample(range(-8, 36), len(cities))  # distinct: "the warmest" has one answer
    conditions = [rng.choice(PAR_CONDITIONS) for _ in cities]
    if rain is not None:  # the city the condition is about: roadshow's first, timezone-gap's second
        conditions[0 if template == "roadshow" else 1] = "rain" if rain else rng.choice(PAR_CONDITIONS)
    pops = [rng.randint(80, 9000) * 1000 + rng.randint(0, 999) for _ in cities]
    weather = {n: weather_row(rng, t, c, shape) for n, t, c in zip(names, temps, conditions, strict=True)}
    population = {n: population_row(p, shape) for n, p in zip(names, pops, strict=True)}
    if template in ("stock-sum", "stock-highest"):
        tickers = rng.sample(PAR_TICKERS, count + rng.randint(1, 3))
        prices = [money(rng.randint(500, 90000) / 100) for _ in tickers]
        calls = [{"name": "get_stock_price", "arguments": {"ticker": t}} for t in tickers[:count]]
        answer: Any = (
            money(sum(prices[:count])) if template == "stock-sum" else tickers[prices.index(max(prices[:count]))]
        )
        return {"stocks": {t: stock_row(p, shape) for t, p in zip(tickers, prices, strict=True)}}, calls, answer
    if template == "timezone-gap":
        zones = {c[0]: timezone_row(c[1], c[2], shape % 2) for c in cities}
        calls = [{"name": "get_timezone", "arguments": {"city": n}} for n in names[:2]]
        calls.append({"name": "get_weather", "arguments": {"city": names[1]}})
        answer = "postpone" if conditions[1] == "rain" else cities[1][2] - cities[0][2]
        return {"timezones": zones, "weather": weather}, calls, answer
    if template == "roadshow":
        calls = [{"name": "get_weather", "arguments": {"city": names[0]}}]
        calls += [{"name": "get_population", "arguments": {"city": n}} for n in names[:2]]
        return {"weather": weather, "population": population}, calls, pops[1 if conditions[0] == "rain" else 0]
    table = "population" if template == "population-sum" else "weather"
    calls = [{"name": PAR_TOOL_OF[table], "arguments": {"city": n}} for n in names[:count]]
    answer = {
        "population-sum": lambda: sum(pops[:count]),
        "warmest": lambda: names[temps.index(max(temps[:count]))],
        "temp-diff": lambda: abs(temps[0] - temps[1]),
    }[template]()
    return {table: weather if table == "weather" else population}, calls, answer


def parallel(rng: random.Random) -> dict:
    seeds = []
    plan = [entry[0] for entry in PAR_PLAN]
    for index, (template, count, rain) in enumerate(PAR_PLAN):
        data, calls, expected = parallel_tables(rng, template, count, rain)
        asked = [next(iter(call["arguments"].values())) for call in calls]
        asked = list(dict.fromkeys(asked))  # a city asked about by two tools is named once
        phrase = PAR_PHRASES[template][plan[:index].count(template) % len(PAR_PHRASES[template])]
        request = phrase.format(cities=join_names(asked), tickers=join_names(asked), a=asked[0], b=asked[-1])
        shuffled = {name: dict(sorted(table.items(), key=lambda _item: rng.random())) for name, table in data.items()}
        if isinstance(expected, float) and expected.is_integer():
            expected = int(expected)
        seeds.append(
            {
                "id": f"par-{index:02d}",
                "template": template,
                "request": request,
                "expected": expected,
                "parallel": calls,
                "data": shuffled,
            }
        )
    city = lambda: {"city": {"type": "string"}}  # noqa: E731 (a fresh schema per tool: YAML without anchors)
    return {
        "suite": "parallel",
        "version": SUITE_VERSION,
        "description": "The first turn's right answer is 2-3 independent tool calls in one turn (weather of cities, "
        "stock prices, populations, time zones plus weather, two tools on one city); `parallel` lists them. Then "
        "submit what the results give (the warmest city, a sum, a difference, a conditional choice).",
        "system_prompt": PARALLEL_SYSTEM,
        "tools": [
            tool("get_weather", "Get the current weather in a city.", city(), ["city"]),
            tool("get_population", "Get the population of a city.", city(), ["city"]),
            tool("get_stock_price", "Get the current price of one share.", {"ticker": {"type": "string"}}, ["ticker"]),
            tool("get_timezone", "Get the time zone and UTC offset of a city.", city(), ["city"]),
            SUBMIT_TEXT,
        ],
        "dry_run": {
            "get_weather": {"kind": "lookup", "table": "weather", "key": "city"},
            "get_population": {"kind": "lookup", "table": "population", "key": "city"},
            "get_stock_price": {"kind": "lookup", "table": "stocks", "key": "ticker"},
            "get_timezone": {"kind": "lookup", "table": "timezones", "key": "city"},
            "submit": {"kind": "submit", "key": "answer"},
        },
        "seeds": seeds,
    }


MAKERS: tuple[Callable[[random.Random], dict], ...] = (aggregation, dependency_chain, ops, parallel)


def build() -> dict[str, dict]:
    """Every suite by name, exactly as main() writes it."""
    return {suite["suite"]: suite for suite in (maker(random.Random(RNG_SEED)) for maker in MAKERS)}


def render(suite: dict) -> str:
    return "# Generated by scripts/make_seeds.py (fixed RNG seed); data, not code.\n" + yaml.safe_dump(
        suite, sort_keys=False, width=120
    )


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, suite in build().items():
        path = OUT / f"{name}.yaml"
        path.write_text(render(suite))
        print(path)


if __name__ == "__main__":
    main()

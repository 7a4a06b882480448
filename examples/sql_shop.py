"""langchain-community's SQL tools as a training environment: a fresh shop database per
rollout, tasks verified by the answer or by the database, references that warm-start.

    cd examples
    ../.venv/bin/seal-graph eval --env sql_shop:make_env --split test --limit 8
    ../.venv/bin/seal-graph train --preset cpu --env sql_shop:make_env --out ../runs/shop

The glue is the code after the task data: tasks, a fresh database per rollout, the
toolkit's tools over it, a verifier (by the answer or by the database): 52 lines.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from langchain_community.tools.sql_database.tool import (
    InfoSQLDatabaseTool,
    ListSQLDatabaseTool,
    QuerySQLDatabaseTool,
)
from langchain_community.utilities import SQLDatabase

from seal_graph.environment import Task
from seal_graph.records import Episode, TurnEvidence, Verdict
from seal_graph.tools.langchain_env import from_langchain_tools

SCHEMA = """
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price REAL, stock INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, product_id INTEGER, quantity INTEGER);
INSERT INTO products VALUES (1,'pen',1.5,40),(2,'ink',4.0,12),(3,'pad',3.0,0),(4,'clip',0.2,300);
INSERT INTO orders VALUES (1,1,3),(2,2,1),(3,1,5),(4,4,20);
"""
QUESTIONS = [  # (question, SQL that answers it, the answer a reply must contain)
    ("How many orders are there?", "SELECT COUNT(*) FROM orders", "4"),
    (
        "How many pens were ordered in all?",
        "SELECT SUM(quantity) FROM orders WHERE product_id=1",
        "8",
    ),
    ("Which product is out of stock?", "SELECT name FROM products WHERE stock=0", "pad"),
    ("What does one ink cost?", "SELECT price FROM products WHERE name='ink'", "4"),
]
CHANGES = [  # (request, SQL that does it); verified by the database afterwards
    ("Set the price of a pad to 2.5.", "UPDATE products SET price=2.5 WHERE name='pad'"),
    ("Restock ink to 50.", "UPDATE products SET stock=50 WHERE name='ink'"),
    ("Delete order 2.", "DELETE FROM orders WHERE id=2"),
    ("Add order 5: 2 clips.", "INSERT INTO orders VALUES (5,4,2)"),
]


SQL_HINT = "The query does not fit the schema: read the table's schema first."
TASKS = {  # (id, request, SQL that does it, the answer a reply must contain or None)
    "train": [
        ("ask-0", *QUESTIONS[0]),
        ("ask-1", *QUESTIONS[1]),
        ("change-0", *CHANGES[0], None),
        ("change-1", *CHANGES[1], None),
    ],
    "test": [
        ("ask-2", *QUESTIONS[2]),
        ("ask-3", *QUESTIONS[3]),
        ("change-2", *CHANGES[2], None),
        ("change-3", *CHANGES[3], None),
    ],
}


# ---- the glue: tasks, a fresh database per rollout, its tools, a verifier ----
def tasks(split: str) -> list[Task]:
    return [
        Task(
            id=f"{split}-{name}",
            turns=[request],
            reference=[[{"name": "sql_db_query", "args": {"query": sql}}]],
            reference_replies=[answer],  # None: the turn closes with "Done."
            metadata={"category": "answer" if answer else "database", "answer": answer},
        )
        for name, request, sql, answer in TASKS[split]
    ]


def new_shop(task: Task | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix="seal-shop-")) / "shop.db"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA)
    return path


def contents(path: Path, then: str | None = None) -> list:
    """Both tables, after running `then` (the reference's SQL) if given."""
    with closing(sqlite3.connect(path)) as db:
        if then:
            db.execute(then)
        return [
            db.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in ("products", "orders")
        ]


def verify(task: Task, path: Path, episode: Episode) -> Verdict:
    if task.metadata["answer"]:  # verified by the answer
        passed = task.metadata["answer"] in episode.reply(0)
        evidence = TurnEvidence(turn=0, passed=passed, expects_calls=True, expects_reply=True)
    else:  # verified by the database: it must end as the reference leaves a fresh one
        reference = new_shop()
        state, expected = contents(path), contents(reference, task.reference[0][0]["args"]["query"])
        shutil.rmtree(reference.parent)
        passed = state == expected
        evidence = TurnEvidence(
            turn=0, passed=passed, expects_calls=True, state=state, expected_state=expected
        )
    return Verdict(reward=float(passed), success=passed, turn_evidence=[evidence])


def make_env():
    def tools(path: Path) -> list:
        db = SQLDatabase.from_uri(f"sqlite:///{path}")
        return [QuerySQLDatabaseTool(db=db), InfoSQLDatabaseTool(db=db), ListSQLDatabaseTool(db=db)]

    return from_langchain_tools(
        "sql-shop",
        tasks={split: tasks(split) for split in TASKS},
        make_state=new_shop,
        tools=tools,
        verify=verify,
        on_close=lambda path: shutil.rmtree(path.parent, ignore_errors=True),
        argument_match="effect",  # another SQL text with the same result is no mismatch
        recovery_hints={"sql": (r"OperationalError|no such (table|column)", SQL_HINT)},
    )

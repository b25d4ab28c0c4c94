"""A Redis Streams consumer for the workload tests: reads its group's new entries ten at
a time, works 20 ms on each, acknowledges it and appends its id to ``--acked`` (ground
truth). It never claims entries an earlier, crashed consumer left pending: those are
lost, which is what the stream RPO must see."""

import argparse
import time

import redis


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--acked", required=True)
    parser.add_argument("--acking", help="each id written here before it is acknowledged "
                                         "(a kill between the two leaves one in doubt)")
    parser.add_argument("--name", default="consumer")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url, decode_responses=True)
    with open(args.acked, "a", buffering=1) as acked:
        while True:
            batches = client.xreadgroup(args.group, args.name, {args.stream: ">"}, count=10,
                                        block=200)
            for _, entries in batches or []:
                for entry_id, _ in entries:
                    time.sleep(0.02)
                    if args.acking:
                        with open(args.acking, "a") as acking:
                            acking.write(entry_id + "\n")
                    client.xack(args.stream, args.group, entry_id)
                    acked.write(entry_id + "\n")


if __name__ == "__main__":
    main()

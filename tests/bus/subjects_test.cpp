#include <doctest/doctest.h>

#include "libbus/subjects.h"

using namespace kvidx;
using namespace kvidx::bus;

TEST_CASE("subjects derive from the default prefix") {
  Subjects s;
  CHECK(s.events(42) == "kv.events.42");
  CHECK(s.events_wildcard() == "kv.events.>");
  CHECK(s.query_scores() == "kv.query.scores");
  CHECK(s.admin_stats() == "kv.admin.stats");
  CHECK(s.admin_workers() == "kv.admin.workers");
  CHECK(s.admin_remove_worker() == "kv.admin.remove_worker");
  CHECK(s.admin_dump() == "kv.admin.dump");
  CHECK(s.routing_decisions() == "kv.routing.decisions");
  CHECK(s.requests(7) == "kv.requests.7");
  CHECK(s.deadletter() == "kv.deadletter");
}

TEST_CASE("subjects follow a custom prefix") {
  Subjects s("fleet.a");
  CHECK(s.events(1) == "fleet.a.events.1");
  CHECK(s.deadletter() == "fleet.a.deadletter");
  CHECK(s.worker_from_events_subject("fleet.a.events.1") == WorkerId{1});
  CHECK_FALSE(s.worker_from_events_subject("kv.events.1").has_value());
}

TEST_CASE("worker id parses only from a well-formed events subject") {
  Subjects s;
  CHECK(s.worker_from_events_subject("kv.events.18446744073709551615") == WorkerId{18446744073709551615ULL});
  CHECK_FALSE(s.worker_from_events_subject("kv.events.18446744073709551616").has_value());
  CHECK_FALSE(s.worker_from_events_subject("kv.events.").has_value());
  CHECK_FALSE(s.worker_from_events_subject("kv.events.12a").has_value());
  CHECK_FALSE(s.worker_from_events_subject("kv.events.1.2").has_value());
  CHECK_FALSE(s.worker_from_events_subject("kv.events.-1").has_value());
  CHECK_FALSE(s.worker_from_events_subject("namespace.dynamo.component.backend.kv-events").has_value());
  CHECK(s.worker_from_requests_subject("kv.requests.5") == WorkerId{5});
}

TEST_CASE("subject syntax validation") {
  CHECK(is_valid_subject("kv.events.>"));
  CHECK(is_valid_subject("a.*.c"));
  CHECK(is_valid_subject("namespace.dynamo.kv-events"));
  CHECK_FALSE(is_valid_subject(""));
  CHECK_FALSE(is_valid_subject("a..b"));
  CHECK_FALSE(is_valid_subject("a.>.b"));
  CHECK_FALSE(is_valid_subject("a b"));
  CHECK_FALSE(is_valid_subject("a.b*"));
  CHECK_FALSE(is_valid_subject("a."));
}

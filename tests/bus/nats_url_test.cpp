// Credentials in NATS URLs never reach a log line or an error message.
#include <doctest/doctest.h>

#include "libbus/nats_url.h"

using kvidx::bus::redact_url;

TEST_CASE("redact_url hides user info, also with '@' or ':' in the password and in server lists") {
  CHECK(redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222");
  CHECK(redact_url("nats://kvidx:s3cret@127.0.0.1:4222") == "nats://***@127.0.0.1:4222");
  CHECK(redact_url("nats://kvidx:p@ss:w@rd@10.0.0.1:4222") == "nats://***@10.0.0.1:4222");
  CHECK(redact_url("nats://token@host") == "nats://***@host");
  CHECK(redact_url("tls://u:p@a:4222,nats://b:4222,nats://v:q@c:4222") ==
        "tls://***@a:4222,nats://b:4222,nats://***@c:4222");
  CHECK(redact_url("u:p@host:4222") == "***@host:4222");
  CHECK(redact_url("") == "");
}

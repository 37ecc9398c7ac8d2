#include "libcodec/mm_extra_info_codec.h"

#include <nlohmann/json.hpp>

namespace kvidx {

std::string encode_mm_extra_info(const std::vector<std::uint64_t>& mm_hashes) {
  using Json = nlohmann::json;
  Json objects = Json::array();
  for (const std::uint64_t hash : mm_hashes) objects.push_back(Json{{"mm_hash", hash}, {"offsets", Json::array()}});
  return Json{{"mm_objects", std::move(objects)}}.dump();
}

}  // namespace kvidx

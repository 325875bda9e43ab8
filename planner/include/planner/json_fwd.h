// The name of the project's JSON value type without the library's definitions (for headers that
// only pass JSON values by reference); planner/json.h has the library and the helpers.
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace capplan {

using Json = nlohmann::ordered_json;  // members keep the order they were added in

}  // namespace capplan

// The policy vocabularies' rows (name, meaning), shared by the model and the parser.
#pragma once

#include <array>

#include "policy/policy.h"

namespace tessera::policy::internal {

#define TESSERA_POLICY_ROW(Type, name, text, meaning) EnumRow<Type>{Type::name, text, meaning},
#define TESSERA_CO_ROW(name, text, meaning) TESSERA_POLICY_ROW(CoTenancy, name, text, meaning)
#define TESSERA_EN_ROW(name, text, meaning) TESSERA_POLICY_ROW(Enforcement, name, text, meaning)
#define TESSERA_DR_ROW(name, text, meaning) TESSERA_POLICY_ROW(DriftAction, name, text, meaning)
inline constexpr std::array kCoTenancyRows = {TESSERA_CO_TENANCY(TESSERA_CO_ROW)};
inline constexpr std::array kEnforcementRows = {TESSERA_ENFORCEMENT(TESSERA_EN_ROW)};
inline constexpr std::array kDriftRows = {TESSERA_DRIFT_ACTIONS(TESSERA_DR_ROW)};
#undef TESSERA_CO_ROW
#undef TESSERA_EN_ROW
#undef TESSERA_DR_ROW
#undef TESSERA_POLICY_ROW

}  // namespace tessera::policy::internal

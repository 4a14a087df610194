// Anchor translation unit so that attnmt_core always has the precompiled header built.
#include "common/pch.h"

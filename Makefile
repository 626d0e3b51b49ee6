# RDMA Verbs Workbook
#
#   make            build every lesson as ./lessonN
#   make tour       install what is missing, build, run the lessons in order on Soft-RoCE
#   make check      install what is missing, build, run every test; ends with "N passed, N failed, N skipped"
#   make grade      build and grade every exercise (EX=4.2 one; SOLUTIONS=1 the reference solutions)
#   make lab-selftest       rdma-core's own tests on rxe0 in the lab (LAB_KERNEL=trixie make lab-selftest)
#   make capture LESSON=N   run lesson N across two lab guests and decode the wire (docs/wireshark.md)
#   make captures           record every two-process lesson's wire into docs/captures/ (scripts/captures.sh)
#   make wireshark-profile  install the Wireshark profile RDMA-Workbook (scripts/wireshark_profile.sh)
#   make capture LESSON=10 SCENARIO=rnr   lesson 10 with one of its scenarios (./lesson10 --list)
#   make bench      lesson 11 beside perftest, then the levers; table, CSVs and plots in bench/
#   make deps       install the packages the workbook needs (scripts/install_deps.sh)
#   make clean
#
# `make` builds in parallel, one job per core; `make -j1` still builds one at a time.
include mk/flags.mk

# Parallel by default. Only the top-level make sets it: sub-makes share its
# jobs (jobserver), and `make -jN` on the command line wins over this line.
# `make clean all` stays serial, so that clean never races the build.
ifeq ($(MAKELEVEL)$(filter clean,$(MAKECMDGOALS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

# Variables a target takes from the command line: make capture LESSON=4.
# Make would expand their text as make syntax (LESSON='$(shell ...)' runs
# even under make -n), and a recipe that pastes $(LESSON) into its shell line
# runs whatever the text says. So each one is frozen here to its literal
# text, must be one plain word, and reaches the script only as an exported
# environment variable that the recipe quotes ("$$LESSON"). A new variable
# (EX, SCENARIO, ...) is added to this list and used the same way.
TARGET_VARS := LESSON EX SOLUTIONS SCENARIO
# Characters a target variable may hold; everything else is refused.
WORD_CHARS := a b c d e f g h i j k l m n o p q r s t u v w x y z \
  A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 . _ -
# $(call strip_chars,TEXT,CHARS): TEXT with every one of CHARS removed.
strip_chars = $(if $(2),$(call strip_chars,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
$(foreach v,$(TARGET_VARS),$(eval override $(v) := $$(value $(v))))
$(foreach v,$(TARGET_VARS),$(if $(or $(word 2,$($(v))),$(call strip_chars,$($(v)),$(WORD_CHARS))),\
  $(error $(v)='$($(v))' is not one plain word (letters, digits, '.', '_', '-'): e.g. make capture LESSON=4)))
export $(TARGET_VARS)

# One lesson per folder: lessons/NN_topic/lessonN.cpp becomes ./lessonN.
LESSON_SRCS := $(sort $(wildcard lessons/[0-9][0-9]_*/lesson*.cpp))
LESSONS     := $(notdir $(basename $(LESSON_SRCS)))
COMMON_SRCS := $(wildcard common/*.cpp)
COMMON_OBJS := $(patsubst common/%.cpp,build/common/%.o,$(COMMON_SRCS))
COMMON_LIB  := build/libworkbook.a
UNIT_SRCS   := $(wildcard tests/unit/*.cpp)
UNIT_BINS   := $(patsubst tests/unit/%.cpp,build/tests/%,$(UNIT_SRCS))

.PHONY: all check tour deps capture captures wireshark-profile clean units exercises grade bench lab-selftest
all: $(LESSONS)

build/common/%.o: common/%.cpp $(wildcard common/*.hpp) mk/flags.mk
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(COMMON_LIB): $(COMMON_OBJS)
	$(AR) rcs $@ $^

# Every lesson is one source file plus the helper library.
define lesson_rule
$(1): $(filter %/$(1).cpp,$(LESSON_SRCS)) $(COMMON_LIB) $(wildcard common/*.hpp)
	$$(CXX) $$(CXXFLAGS) $$< $(COMMON_LIB) $$(LDLIBS) -o $$@
endef
$(foreach l,$(LESSONS),$(eval $(call lesson_rule,$(l))))

build/tests/%: tests/unit/%.cpp $(COMMON_LIB) $(wildcard common/*.hpp)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $< $(COMMON_LIB) $(LDLIBS) -o $@

units: $(UNIT_BINS)

# Exercises beside each lesson: lessons/NN_topic/exercises/N.M/exN_M.cpp is the
# starter a learner edits, lessons/NN_topic/exercises/solutions/exN_M.cpp the
# reference solution. scripts/grade.sh builds them into build/exercises/.
EX_STARTERS  := $(foreach f,$(wildcard lessons/*/exercises/*/ex*.cpp),$(if $(findstring /solutions/,$(f)),,$(f)))
EX_SOLUTIONS := $(wildcard lessons/*/exercises/solutions/ex*.cpp)
EX_BINS      :=
define exercise_rule
build/exercises/$(2)/$(notdir $(basename $(1))): $(1) $(COMMON_LIB) $(wildcard common/*.hpp)
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$< $(COMMON_LIB) $$(LDLIBS) -o $$@
EX_BINS += build/exercises/$(2)/$(notdir $(basename $(1)))
endef
$(foreach s,$(EX_STARTERS),$(eval $(call exercise_rule,$(s),starter)))
$(foreach s,$(EX_SOLUTIONS),$(eval $(call exercise_rule,$(s),solution)))
exercises: $(EX_BINS)

deps:
	@scripts/install_deps.sh

# The exercises are built here, with every core, before the suites start
# side by side (tests/grade.bats would build them in one lane). A starter you
# edited that does not compile is reported by the grade tests, not here.
check: deps
	@$(MAKE) --no-print-directory all units
	@$(MAKE) --no-print-directory -k -s exercises >/dev/null 2>&1 || true
	@tests/run.sh

tour: deps
	@$(MAKE) --no-print-directory all
	@scripts/tour.sh

# EX=N.M grades one exercise, SOLUTIONS=1 the reference solutions; both reach
# the script through the environment, never pasted into the shell line.
grade: deps
	@$(MAKE) --no-print-directory all
	@scripts/grade.sh

# rdma-core's own test suite (python3-pyverbs) against rxe0 in the lab, on
# the kernel LAB_KERNEL names; known rxe gaps in tests/lab/selftest-expected.txt.
lab-selftest: deps
	@scripts/lab_selftest.sh

capture: deps
	@$(MAKE) --no-print-directory all
	@scripts/capture_lesson.sh "$$LESSON" "$$SCENARIO"

# Every two-process lesson's capture, recorded into docs/captures/ with a
# comment saying what ran (scripts/captures.sh --check compares them).
captures: deps
	@$(MAKE) --no-print-directory all
	@scripts/captures.sh

wireshark-profile:
	@scripts/wireshark_profile.sh

# Lesson 11 measured beside perftest, and its levers one at a time
# (scripts/bench.sh): a table with ratios, CSVs and PNG plots in bench/.
bench: deps
	@$(MAKE) --no-print-directory lesson11
	@scripts/bench.sh

clean:
	rm -rf build $(LESSONS)

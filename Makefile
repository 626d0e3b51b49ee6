# RDMA Verbs Workbook
#
#   make            build every lesson as ./lessonN
#   make tour       install what is missing, build, run the lessons in order on Soft-RoCE
#   make check      install what is missing, build, run every test; ends with "N passed, N failed, N skipped"
#   make check-kernels      the lesson suites and the tour on trixie and trixie-backports (KERNELS=trixie: one)
#   make grade      build and grade every exercise (EX=4.2 one; SOLUTIONS=1 the reference solutions)
#   make ex4.2      build one exercise, your lessons/*/exercises/4.2/ex4_2.cpp (made from its starter once)
#   make exercise-reset EX=4.2   start one over; exercise-save / exercise-refresh: docs/contributing.md
#   make lab-selftest       rdma-core's own tests on rxe0 in the lab (LAB_KERNEL=trixie make lab-selftest)
#   make capture LESSON=N   run lesson N across two lab guests and decode the wire (docs/wireshark.md)
#   make captures           record every two-process lesson's wire into docs/captures/ (scripts/capture/shipped.sh)
#   make wireshark-profile  install the Wireshark profile RDMA-Workbook (scripts/capture/wireshark_profile.sh)
#   make capture LESSON=10 SCENARIO=rnr   lesson 10 with one of its scenarios (./lesson10 --list, ./lesson10_nak --list)
#   make bench      lesson 11 beside perftest, then the levers; table, CSVs and plots in bench/
#   make deps       install the packages the workbook needs (scripts/install_deps.sh)
#   make site       the workbook as a site in build/site/ (scripts/site/build.sh): contents, search, diagrams, offline
#   make doctor     check this machine: one line per check, OK/WARN/FAIL, each with its fix
#                   (scripts/doctor.sh; -h lists the checks, --device DEV, --peer HOST)
#   make help       this list
#   make clean      remove what make built (build/, ./lessonN)
#
# `make` builds in parallel, one job per core; `make -j1` still builds one at a time.
# Shared compiler flags for every lesson, the helper library and the unit tests.
# pkg-config supplies the rdma-core flags, so the same Makefile works on any distribution.
#
# CXXFLAGS is yours: `make CXXFLAGS='-O1 -g -fsanitize=address,undefined'`
# (or the same in the environment) replaces the default -O2 -g, and the
# flags the workbook needs (C++20, warnings as errors, common/, rdma-core's
# pkg-config flags) are appended to it either way (override: a command-line
# value would otherwise replace them too). The same for LDLIBS.

# Every variable set on the command line (KERNELS, CXXFLAGS, ...) is text,
# never make syntax: make would expand `make clean KERNELS='$(shell cmd)'`
# (where the value is used, and wherever make exports it to a recipe's
# environment, so even `make -n check-kernels` runs cmd). Freezing each one
# to its literal text here, before any use, stops that; the four that
# targets paste into commands are held to one plain word below.
$(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(eval override $(v) := $$(value $(v)))))

CXX      ?= g++
PKGS     := libibverbs librdmacm
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CXXFLAGS ?= -O2 -g
override CXXFLAGS += -std=c++20 -Wall -Wextra -Werror -Icommon $(PKG_CFLAGS)
# Verbs structs are filled with designated initializers; the fields they leave
# out are zero by the language rules, which is what the verbs expect. g++ 12's
# -Wextra would still flag every omitted field, so that one warning is off.
override CXXFLAGS += -Wno-missing-field-initializers
override LDLIBS   += $(PKG_LIBS)

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

# One lesson per folder: lessons/NN_topic/lessonN.cpp becomes ./lessonN, and a
# second program of the lesson beside it, lessonN_NAME.cpp, ./lessonN_NAME
# (lesson10_nak, lesson12_mcast, lesson15_probe).
LESSON_SRCS := $(sort $(wildcard lessons/[0-9][0-9]_*/lesson*.cpp))
LESSONS     := $(notdir $(basename $(LESSON_SRCS)))
COMMON_SRCS := $(wildcard common/*.cpp)
COMMON_OBJS := $(patsubst common/%.cpp,build/common/%.o,$(COMMON_SRCS))
COMMON_LIB  := build/libworkbook.a
UNIT_SRCS   := $(wildcard tests/unit/*.cpp)
UNIT_BINS   := $(patsubst tests/unit/%.cpp,build/tests/%,$(UNIT_SRCS))
# Hostile peers the suites start (tests/helpers/*.cpp): build/tests/helpers/NAME.
HELPER_SRCS := $(wildcard tests/helpers/*.cpp)
HELPER_BINS := $(patsubst tests/helpers/%.cpp,build/tests/helpers/%,$(HELPER_SRCS))

.PHONY: help all check check-kernels tour deps site site-deps doctor capture captures wireshark-profile clean units exercises grade bench lab-selftest
.PHONY: exercise-files exercise exercise-reset exercise-save exercise-refresh
all: $(LESSONS) exercise-files

# make help: the list at the top of this file, one target a line.
help:
	@awk 'NR > 2 && /^#   / { sub(/^# /, ""); print } /^#   make clean/ { exit }' $(firstword $(MAKEFILE_LIST))

build/common/%.o: common/%.cpp $(wildcard common/*.hpp) Makefile
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(COMMON_LIB): $(COMMON_OBJS)
	rm -f $@ && $(AR) rcs $@ $^

# Every lesson is one source file plus the helper library; a header in the
# lesson's own folder is what that lesson's two programs share
# (lessons/10_failures/failures.hpp).
define lesson_rule
$(1): $(filter %/$(1).cpp,$(LESSON_SRCS)) $(COMMON_LIB) $(wildcard common/*.hpp) \
  $(wildcard $(dir $(filter %/$(1).cpp,$(LESSON_SRCS)))*.hpp)
	$$(CXX) $$(CXXFLAGS) $$< $(COMMON_LIB) $$(LDLIBS) -o $$@
endef
$(foreach l,$(LESSONS),$(eval $(call lesson_rule,$(l))))

# Build speed only, never meaning: the exercises, unit programs and test
# helpers (89 programs) are compiled with the system headers they all use
# precompiled: g++ -include build/pch/system.hpp reads that header first; it
# takes system.hpp.gch instead when that was made with the same compiler
# and flags (the stamp remakes it when they change), and the header itself
# otherwise. Measured: 1.07 s per exercise without, 0.56 s with. The lessons
# and common/ are compiled without it, so that a lesson that forgets an
# #include still fails to build.
PCH_HEADERS := algorithm cerrno chrono cinttypes cstddef cstdint cstdio cstdlib cstring \
  fstream map memory optional span string thread vector \
  arpa/inet.h endian.h fcntl.h poll.h time.h unistd.h infiniband/verbs.h rdma/rdma_cma.h
# g++ 12 sees a few false -Warray-bounds in std::string's inlined code
# with the .gch that it does not see without (exercise 7.3's error
# message, seen 2026-12-02): a compile that fails with the header is done
# again without it, and only that one's messages are shown.
# $(call pch_compile,SOURCE): the recipe; it prints the plain command
# (not under make -s).
PCH := build/pch/system.hpp
pch_compile = @$(if $(findstring s,$(firstword -$(MAKEFLAGS))),:,echo) '$(CXX) $(CXXFLAGS) $(1) $(COMMON_LIB) $(LDLIBS) -o $@'; \
  $(CXX) $(CXXFLAGS) -include $(PCH) $(1) $(COMMON_LIB) $(LDLIBS) -o $@ 2>/dev/null || \
  $(CXX) $(CXXFLAGS) $(1) $(COMMON_LIB) $(LDLIBS) -o $@
# build/pch/flags: the compiler and flags of this make, rewritten (here,
# as the Makefile is read) only when they differ from the last ones.
PCH_FLAGS := $(CXX) $(CXXFLAGS)
# (Not in a read-only checkout, such as the host's seen from a lab guest, nor
# in a dry run, make -n, which changes nothing: a stamp it rewrote would
# rebuild every program at the next make, under a lesson the lab was running.)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifneq ($(file <build/pch/flags),$(PCH_FLAGS))
ifeq ($(shell mkdir -p build/pch 2>/dev/null && test -w build/pch && echo w),w)
$(file >build/pch/flags,$(PCH_FLAGS))
endif
endif
endif
$(PCH).gch: build/pch/flags Makefile
	@printf '#include <%s>\n' $(PCH_HEADERS) >$(PCH)
	$(CXX) $(CXXFLAGS) -x c++-header $(PCH) -o $@

# (A unit program may test a lesson's own header: tests/unit/ud_datagram.cpp.)
build/tests/%: tests/unit/%.cpp $(COMMON_LIB) $(wildcard common/*.hpp) $(wildcard lessons/*/*.hpp) $(PCH).gch
	@mkdir -p $(@D)
	$(call pch_compile,$<)

build/tests/helpers/%: tests/helpers/%.cpp $(COMMON_LIB) $(wildcard common/*.hpp) $(PCH).gch
	@mkdir -p $(@D)
	$(call pch_compile,$<)

units: $(UNIT_BINS) $(HELPER_BINS)

# The rxe facts generator's probe, a docs probe and no test helper: built
# only by scripts/maintainers/rxe_facts.sh, which runs it in the lab.
build/maintainers/rxe_facts: scripts/maintainers/rxe_facts.cpp $(COMMON_LIB) $(wildcard common/*.hpp)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $< $(COMMON_LIB) $(LDLIBS) -o $@

# Exercises beside each lesson, each piece of code stored once
# (docs/contributing.md): lessons/NN_topic/exercises/N.M/starter.patch (the
# lesson with a few changes) or N.M/starter.cpp (a program of its own), and
# exercises/solutions/exN_M.patch (the starter with its TODOs done).
# scripts/exercises/exercise.sh makes the learner's file N.M/exN_M.cpp from them once,
# when it is missing; it is git-ignored and nothing but exercise-reset
# overwrites it. The reference solutions are made into build/exercises/src/.
EX_DIRS := $(sort $(patsubst %/grade.bash,%,$(wildcard lessons/*/exercises/*.*/grade.bash)))
EX_IDS  := $(notdir $(EX_DIRS))
EX_BINS :=
EX_FILES :=
# $(call exercise_rule,FOLDER,N.M,exN_M); an exercise sees its lesson's
# headers (lessons/12_ud_multicast/ud.hpp) as the lesson does: -I its folder.
ex_lesson_dir = $(dir $(patsubst %/,%,$(dir $(1))))
define exercise_rule
$(1)/$(3).cpp:
	@scripts/exercises/exercise.sh files $(2)
build/exercises/src/starter/$(3).cpp: $(wildcard $(1)/starter.*) $(if $(wildcard $(1)/starter.patch),$(wildcard $(dir $(patsubst %/,%,$(dir $(1))))lesson*.cpp)) scripts/exercises/exercise.sh
	@scripts/exercises/exercise.sh source $(2) starter $$@
build/exercises/src/solution/$(3).cpp: build/exercises/src/starter/$(3).cpp $(dir $(1))solutions/$(3).patch
	@scripts/exercises/exercise.sh source $(2) solution $$@
build/exercises/starter/$(3): $(1)/$(3).cpp $(COMMON_LIB) $(wildcard common/*.hpp) $(wildcard $(call ex_lesson_dir,$(1))*.hpp) $(PCH).gch
	@mkdir -p $$(@D)
	$$(call pch_compile,-I$(call ex_lesson_dir,$(1)) $$<)
build/exercises/solution/$(3): build/exercises/src/solution/$(3).cpp $(COMMON_LIB) $(wildcard common/*.hpp) $(wildcard $(call ex_lesson_dir,$(1))*.hpp) $(PCH).gch
	@mkdir -p $$(@D)
	$$(call pch_compile,-I$(call ex_lesson_dir,$(1)) $$<)
# make ex4.2: that one exercise, your file, built into build/exercises/starter/ex4_2.
.PHONY: ex$(2)
ex$(2): build/exercises/starter/$(3)
EX_BINS += build/exercises/starter/$(3) build/exercises/solution/$(3)
EX_FILES += $(1)/$(3).cpp
endef
$(foreach d,$(EX_DIRS),$(eval $(call exercise_rule,$(d),$(notdir $(d)),ex$(subst .,_,$(notdir $(d))))))
exercises: $(EX_BINS)
# The learner's files, made where missing (make, make grade).
exercise-files: $(EX_FILES)
# Never deleted by make, not even when a make is interrupted.
.PRECIOUS: $(EX_FILES)

# One exercise: make exercise EX=4.2 (the same as make ex4.2) builds your
# file; exercise-reset starts it over (SOLUTIONS=1: with the solution in it);
# exercise-save stores it back (maintainers; SOLUTIONS=1: as the solution);
# exercise-refresh carries every patch over to today's lessons.
ex_needed = $(if $(EX),,$(error make $@ takes an exercise: make $@ EX=4.2))
exercise:
	$(ex_needed)@$(MAKE) --no-print-directory "ex$$EX"
exercise-reset:
	$(ex_needed)@scripts/exercises/exercise.sh reset "$$EX" $(if $(SOLUTIONS),--solution)
exercise-save:
	$(ex_needed)@scripts/exercises/exercise.sh save "$$EX" $(if $(SOLUTIONS),--solution)
exercise-refresh:
	@scripts/exercises/exercise.sh refresh $(if $(EX),"$$EX")

deps:
	@scripts/install_deps.sh

# The site's tools (mkdocs, mkdocs-material, chromium for tests/site.bats).
site-deps:
	@scripts/install_deps.sh site

# docs/ and README as a static site in build/site/: open build/site/index.html,
# or serve it (cd build/site && python3 -m http.server) for the search.
site: site-deps
	@scripts/site/build.sh

# Reads this machine and changes nothing; needs no build and no packages.
doctor:
	@scripts/doctor.sh

# The exercises are built here, with every core, before the suites start
# side by side (tests/grade.bats would build them in one lane). A starter you
# edited that does not compile is reported by the grade tests, not here.
# The site's tools after the workbook's, not beside them: one apt-get at a
# time (tests/site.bats builds the site and opens it in Chromium).
check: deps
	@scripts/install_deps.sh site
	@$(MAKE) --no-print-directory all units
	@$(MAKE) --no-print-directory -k -s exercises >/dev/null 2>&1 || true
	@tests/run.sh

# The lesson suites and the tour on the lab's other kernels (docs/lab.md),
# each kernel's run in labs of its own; KERNELS names them (through the
# environment, as EX does for grade).
check-kernels: deps
	@$(MAKE) --no-print-directory all units
	@scripts/maintainers/check_kernels.sh

tour: deps
	@$(MAKE) --no-print-directory all
	@scripts/lessons/tour.sh

# EX=N.M grades one exercise, SOLUTIONS=1 the reference solutions; both reach
# the script through the environment, never pasted into the shell line.
grade: deps
	@$(MAKE) --no-print-directory all
	@scripts/exercises/grade.sh

# rdma-core's own test suite (python3-pyverbs) against rxe0 in the lab, on
# the kernel LAB_KERNEL names; known rxe gaps in scripts/maintainers/lab_selftest_expected.txt.
lab-selftest: deps
	@scripts/maintainers/lab_selftest.sh

capture: deps
	@$(MAKE) --no-print-directory all
	@scripts/capture/lesson.sh "$$LESSON" "$$SCENARIO"

# Every two-process lesson's capture, recorded into docs/captures/ with a
# comment saying what ran (scripts/capture/shipped.sh --check compares them).
captures: deps
	@$(MAKE) --no-print-directory all
	@scripts/capture/shipped.sh

wireshark-profile:
	@scripts/capture/wireshark_profile.sh

# Lesson 11 measured beside perftest, and its levers one at a time
# (scripts/bench/run.sh): a table with ratios, CSVs and PNG plots in bench/.
bench: deps
	@$(MAKE) --no-print-directory lesson11
	@scripts/bench/run.sh

clean:
	rm -rf build $(LESSONS)
